// compare: identical answers pass, drift / flips / missing items fail their gates.
#include <gtest/gtest.h>

#include "bench/compare.h"

namespace clef::bench {
namespace {

using Json = nlohmann::ordered_json;

Json report() {
  return Json::parse(R"({"requests": [
    {"id": "a", "outcome": "ok", "answer": {"q": {"type": "choice", "choice": "x", "confidence": 0.6,
      "probabilities": {"x": 0.6, "y": 0.4}}}},
    {"id": "b", "outcome": "ok", "answer": {"n": {"type": "noul", "noul": 0.7},
      "s": {"type": "score", "score": 1.2, "confidence": 0.5, "probabilities": {"0": 0.3, "1": 0.2, "2": 0.5}}}},
    {"id": "b", "outcome": "transport", "answer": null}]})");
}

TEST(Compare, IdenticalRunsPass) {
  const CompareResult r = compare_reports(report(), report(), {});
  EXPECT_TRUE(r.passed()) << compare_summary(r, {});
  EXPECT_EQ(r.items_compared, 2u);
  EXPECT_EQ(r.questions_compared, 3u);
  EXPECT_EQ(r.flips, 0);
  EXPECT_EQ(r.max_probability_drift, 0.0);
}

TEST(Compare, ProbabilityDriftGate) {
  Json b = report();
  b["requests"][0]["answer"]["q"]["probabilities"]["x"] = 0.603;
  b["requests"][0]["answer"]["q"]["probabilities"]["y"] = 0.397;
  CompareResult r = compare_reports(report(), b, {});
  EXPECT_FALSE(r.passed());
  EXPECT_NEAR(r.max_probability_drift, 0.003, 1e-9);
  EXPECT_EQ(r.max_probability_where, "a/q");
  CompareGates loose;
  loose.max_probability_drift = 0.005;
  EXPECT_TRUE(compare_reports(report(), b, loose).passed());
}

TEST(Compare, FlipsAndScoreDrift) {
  Json b = report();
  b["requests"][1]["answer"]["n"]["noul"] = 0.45;  // yes -> no
  b["requests"][1]["answer"]["s"]["score"] = 1.25;
  CompareGates g;
  g.max_probability_drift = 1.0;
  const CompareResult r = compare_reports(report(), b, g);
  EXPECT_EQ(r.flips, 1);
  EXPECT_NEAR(r.max_score_drift, 0.05, 1e-9);
  EXPECT_EQ(r.failed_gates.size(), 2u) << compare_summary(r, g);
  g.max_flips = 1;
  g.max_score_drift = 0.1;
  EXPECT_TRUE(compare_reports(report(), b, g).passed());
}

TEST(Compare, ChoiceFlip) {
  Json b = report();
  b["requests"][0]["answer"]["q"]["choice"] = "y";
  const CompareResult r = compare_reports(report(), b, {});
  EXPECT_EQ(r.flips, 1);
  EXPECT_FALSE(r.passed());
}

TEST(Compare, ItemsAnsweredInOneRunOnlyFail) {
  Json b = report();
  b["requests"][0]["outcome"] = "http_status";
  const CompareResult r = compare_reports(report(), b, {});
  EXPECT_EQ(r.only_in_a, 1u);
  EXPECT_FALSE(r.passed());
}

TEST(Compare, SubManifestLeavesOutOnlyTheItemsBNeverAskedFor) {
  Json b = report();
  b["requests"].erase(0);  // B's manifest lacks A's first item
  CompareGates g;
  EXPECT_EQ(compare_reports(report(), b, g).only_in_a, 1u);
  EXPECT_FALSE(compare_reports(report(), b, g).passed());
  g.b_subset = true;
  const CompareResult r = compare_reports(report(), b, g);
  EXPECT_EQ(r.only_in_a, 0u);
  EXPECT_EQ(r.not_asked_in_b, 1u);
  EXPECT_TRUE(r.passed()) << compare_summary(r, g);
  // An item B asked for but did not answer still fails.
  b["requests"][0]["outcome"] = "http_status";
  const CompareResult failed = compare_reports(report(), b, g);
  EXPECT_EQ(failed.only_in_a, 1u);
  EXPECT_FALSE(failed.passed());
}

TEST(Compare, NotAReport) {
  EXPECT_THROW(compare_reports(Json::object(), report(), {}), std::runtime_error);
}

}  // namespace
}  // namespace clef::bench

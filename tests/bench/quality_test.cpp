// Quality scoring rules: noul yes only above 0.5, ties to the first label in `labels` order, score
// argmax and |sum i*p_i - expected|.
#include <gtest/gtest.h>

#include "bench/manifest.h"
#include "bench/quality.h"

namespace clef::bench {
namespace {

using Json = nlohmann::ordered_json;

Item item(const std::string& line) {
  return parse_manifest(line, "m", {}).items[0];
}

TEST(Quality, ChoiceTiesGoToFirstLabel) {
  const Item it =
      item(R"({"id": "a", "state": "s", "question": {"type": "choice", "criteria": )"
           R"({"x": "X", "y": "Y", "z": "Z"}}, "labels": ["z", "y", "x"], "expected": "y"})");
  const Json tie =
      Json::parse(R"({"decision": {"type": "choice", "choice": "x", "confidence": 0.4,)"
                  R"( "probabilities": {"x": 0.4, "y": 0.4, "z": 0.2}}})");
  // x and y tie; labels order puts y first, whatever the server's own choice field says.
  EXPECT_EQ(decision_of(it.questions[0], tie["decision"]), "y");
  const QualityCounts c = score_item(it, &tie);
  EXPECT_EQ(c.choice_n, 1u);
  EXPECT_EQ(c.choice_ok, 1u);
}

TEST(Quality, NoulYesOnlyAboveHalf) {
  const Item yes =
      item(R"({"id": "a", "state": "s", "question": {"type": "noul"}, "expected": "yes"})");
  const Item no =
      item(R"({"id": "a", "state": "s", "question": {"type": "noul"}, "expected": "no"})");
  const Json half = Json::parse(R"({"decision": {"type": "noul", "noul": 0.5}})");
  const Json above = Json::parse(R"({"decision": {"type": "noul", "noul": 0.5001}})");
  EXPECT_EQ(score_item(yes, &half).noul_ok, 0u);
  EXPECT_EQ(score_item(no, &half).noul_ok, 1u);
  EXPECT_EQ(score_item(yes, &above).noul_ok, 1u);
  EXPECT_EQ(score_item(yes, &above).noul_n, 1u);
}

TEST(Quality, ScoreArgmaxAndAbsoluteError) {
  const Item it = item(
      R"({"id": "a", "state": "s", "question": {"type": "score", "criteria": ["a", "b", "c"]},)"
      R"( "expected": 2})");
  const Json a = Json::parse(R"({"decision": {"type": "score", "score": 1.3, "confidence": 0.5,)"
                             R"( "probabilities": {"0": 0.2, "1": 0.3, "2": 0.5}}})");
  const QualityCounts c = score_item(it, &a);
  EXPECT_EQ(c.score_n, 1u);
  EXPECT_EQ(c.score_ok, 1u);
  EXPECT_NEAR(c.score_abs_err_sum, 0.7, 1e-12);
  const Json tie = Json::parse(R"({"decision": {"type": "score", "score": 1.0, "confidence": 0.4,)"
                               R"( "probabilities": {"0": 0.4, "1": 0.2, "2": 0.4}}})");
  EXPECT_EQ(decision_of(it.questions[0], tie["decision"]), "0");  // tie: the lowest level
  EXPECT_EQ(score_item(it, &tie).score_ok, 0u);
}

TEST(Quality, UnansweredIsCountedNotScored) {
  const Item it =
      item(R"({"id": "a", "state": "s", "question": {"type": "noul"}, "expected": "no"})");
  const QualityCounts c = score_item(it, nullptr);
  EXPECT_EQ(c.unanswered, 1u);
  EXPECT_EQ(c.noul_n, 0u);
  const Json j = quality_json(c);
  EXPECT_TRUE(j["noul_acc"].is_null());
  EXPECT_EQ(j["unanswered"], 1);
}

TEST(Quality, JsonRatios) {
  QualityCounts c;
  c.choice_n = 4;
  c.choice_ok = 3;
  c.score_n = 2;
  c.score_abs_err_sum = 1.0;
  const Json j = quality_json(c);
  EXPECT_DOUBLE_EQ(j["choice_acc"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["score_mae"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["score_acc"].get<double>(), 0.0);
  EXPECT_TRUE(j["noul_acc"].is_null());
}

}  // namespace
}  // namespace clef::bench

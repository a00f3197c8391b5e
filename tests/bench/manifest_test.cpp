// Manifest reading: both line forms, tiers, expected checking, and clear refusals with line
// numbers.
#include <gtest/gtest.h>

#include "bench/manifest.h"

namespace clef::bench {
namespace {

const char* kJev =
    R"({"id": "hard-x-01", "family": "x", "state": {"b": 1, "a": [2.5, "t"]}, )"
    R"("question": {"type": "choice", "instructions": "Pick", "criteria": {"z": "Z", "a": "A"}}, )"
    R"("labels": ["a", "z"], "expected": "z", "split": "public", "group": "g"})";

TEST(Manifest, JevBenchRecordBecomesDecisionRequest) {
  ManifestOptions o;
  o.model = "clef-flash";
  const Manifest m = parse_manifest(kJev, "m.jsonl", o);
  ASSERT_EQ(m.items.size(), 1u);
  const Item& it = m.items[0];
  EXPECT_EQ(it.id, "hard-x-01");
  EXPECT_EQ(it.tier, "public");
  EXPECT_EQ(it.model, "clef-flash");
  // Member order of the state and the criteria is kept as written.
  EXPECT_EQ(it.body,
            R"({"model":"clef-flash","state":{"b":1,"a":[2.5,"t"]},"questions":{"decision":)"
            R"({"type":"choice","instructions":"Pick","criteria":{"z":"Z","a":"A"}}}})");
  ASSERT_EQ(it.questions.size(), 1u);
  const QuestionSpec& q = it.questions[0];
  EXPECT_EQ(q.id, "decision");
  EXPECT_EQ(q.type, QuestionType::Choice);
  EXPECT_EQ(q.options, (std::vector<std::string>{"z", "a"}));
  EXPECT_EQ(q.tie_order, (std::vector<std::string>{"a", "z"}));  // labels order
  EXPECT_EQ(q.expected_label, "z");
  EXPECT_TRUE(it.has_expected());
  EXPECT_EQ(m.sha256.size(), 64u);
}

TEST(Manifest, TierSources) {
  ManifestOptions o;
  EXPECT_EQ(parse_manifest(kJev, "m", o).items[0].tier, "public");
  o.tier_key = "id-prefix";
  EXPECT_EQ(parse_manifest(kJev, "m", o).items[0].tier, "hard");
  o.tier_key = "group";
  EXPECT_EQ(parse_manifest(kJev, "m", o).items[0].tier, "g");
  o.tier_key = "";
  const char* tiered =
      R"({"id": 7, "tier": "easy", "split": "public", "state": "s", "question": {"type": "noul"}})";
  const Manifest m = parse_manifest(tiered, "m", o);
  EXPECT_EQ(m.items[0].tier, "easy");
  EXPECT_EQ(m.items[0].id, "7");
  EXPECT_FALSE(m.items[0].has_expected());
  const char* none = R"({"id": "a", "state": "s", "question": {"type": "noul"}})";
  EXPECT_EQ(parse_manifest(none, "m", o).items[0].tier, "all");
}

TEST(Manifest, RequestFormKeepsModelAndMapsExpected) {
  const char* text =
      R"({"id": "r1", "request": {"model": "mine", "state": "s", "questions": {"q0": {"type": "noul"}, )"
      R"("q1": {"type": "score", "criteria": ["lo", "mid", "hi"]}}}, "expected": {"q0": true, "q1": 2}})"
      "\n\n"
      R"({"id": "r2", "request": {"state": "s", "questions": {"only": {"type": "noul"}}}, "expected": "no"})";
  ManifestOptions o;
  o.model = "default-name";
  const Manifest m = parse_manifest(text, "m", o);
  ASSERT_EQ(m.items.size(), 2u);
  EXPECT_EQ(m.items[0].model, "mine");
  EXPECT_EQ(m.items[0].questions[0].expected_label, "yes");
  EXPECT_EQ(m.items[0].questions[1].expected_level, 2);
  EXPECT_EQ(m.items[0].questions[1].options, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(m.items[1].model, "default-name");
  EXPECT_EQ(m.items[1].questions[0].expected_label, "no");
  o.override_model = true;
  EXPECT_EQ(parse_manifest(text, "m", o).items[0].model, "default-name");
}

TEST(Manifest, NullScoreExpectationIsNotScored) {
  const char* text =
      R"({"id": "s", "state": "x", "question": {"type": "score", "criteria": ["a", "b"]}, "expected": null})";
  const Manifest m = parse_manifest(text, "m", {});
  EXPECT_FALSE(m.items[0].has_expected());
}

void expect_refused(const std::string& text, const std::string& fragment) {
  try {
    parse_manifest(text, "f.jsonl", {});
    FAIL() << "accepted: " << text;
  } catch (const ManifestError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Manifest, RefusesWhatCannotBeCheckedOrScored) {
  const std::string ok = R"({"id": "a", "state": "s", "question": {"type": "noul"}})";
  expect_refused(ok + "\n{bad json", "f.jsonl:2: invalid JSON");
  expect_refused(ok + "\n" + ok, "f.jsonl:2: duplicate id 'a'");
  expect_refused("", "no items");
  expect_refused(R"([1, 2])", "must be a JSON object");
  expect_refused(R"({"id": "a", "question": {"type": "noul"}})", "needs \"state\"");
  expect_refused(R"({"id": "a", "state": "s", "question": {"type": "rank"}})",
                 "unknown type 'rank'");
  expect_refused(R"({"id": "a", "state": "s", "question": {"type": "choice", "criteria": {}}})",
                 "non-empty criteria object");
  expect_refused(
      R"({"id": "a", "state": "s", "question": {"type": "choice", "criteria": {"x": "X"}}, )"
      R"("expected": "y"})",
      "expected 'y' is not one of its options");
  expect_refused(
      R"({"id": "a", "state": "s", "question": {"type": "score", "criteria": ["a", "b"]}, )"
      R"("expected": 2})",
      "outside 0..1");
  expect_refused(
      R"({"id": "a", "state": "s", "question": {"type": "score", "criteria": ["a", "b"]}, )"
      R"("expected": 1e300})",
      "integer level or null");
  expect_refused(R"({"id": "a", "state": "s", "question": {"type": "noul"}, "expected": "maybe"})",
                 "\"yes\", \"no\"");
  expect_refused(
      R"({"id": "a", "request": {"questions": {"q": {"type": "noul"}}}, "expected": {"x": "yes"}})",
      "unknown question 'x'");
  expect_refused(
      R"({"id": "a", "request": {"questions": {"q": {"type": "noul"}, "r": {"type": "noul"}}}, )"
      R"("expected": "yes"})",
      "for several questions");
  expect_refused(R"({"id": "a", "request": {"questions": {}}})", "non-empty questions");
}

TEST(Manifest, IntegralFloatLevelIsALevel) {
  const Manifest m = parse_manifest(
      R"({"id": "a", "state": "s", "question": {"type": "score", "criteria": ["a", "b", "c"]}, "expected": 2.0})",
      "m", {});
  EXPECT_EQ(m.items[0].questions[0].expected_level, 2);
}

TEST(Manifest, MissingFileIsAClearError) {
  EXPECT_THROW(load_manifest("/nonexistent/manifest.jsonl", {}), ManifestError);
}

}  // namespace
}  // namespace clef::bench

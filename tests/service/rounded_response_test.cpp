// The rounded-response comparator (tests/support/rounded_response.h) on hand-made responses: what
// it lets through (exact matches, a one-unit difference whose unrounded values straddle the
// rounding boundary) and what it must report.
#include <gtest/gtest.h>

#include <string>

#include "support/rounded_response.h"

namespace clef {
namespace {

using testsupport::ReferenceProbabilities;
using testsupport::rounded_response_mismatches;

json::Value parse(const std::string& text) {
  json::ParseError err;
  auto v = json::parse(text, &err);
  if (!v) throw std::runtime_error(err.message + " in " + text);
  return *v;
}

// The reference's rounded answer. Score = 1 + 4 * p4 with p = {p0, .1, .15, .2, p4}, p0 + p4 = .55.
std::string reference_text(const std::string& score = "2.7735") {
  return R"({"model":"m","answers":{)"
         R"("q0":{"type":"choice","choice":"alpha","confidence":0.7042,)"
         R"("probabilities":{"alpha":0.7042,"a.b":0.2958}},)"
         R"("q1":{"type":"noul","noul":0.3826},)"
         R"("q2":{"type":"score","score":)" +
         score +
         R"(,"confidence":0.4434,"legend":{"0":"none","1":"low","2":"mid","3":"high","4":"max"},)"
         R"("probabilities":{"0":0.1066,"1":0.1,"2":0.15,"3":0.2,"4":0.4434}}},)"
         R"("usage":{"input_tokens":511,"output_tokens":0}})";
}

ReferenceProbabilities reference_probs(double p4 = 0.4433628) {
  return {{"q0", {{"a.b", 0.29582685}, {"alpha", 0.70417315}}},
          {"q1", {{"true", 0.38263997}, {"false", 0.61736003}}},
          {"q2", {{"0", 0.55 - p4}, {"1", 0.1}, {"2", 0.15}, {"3", 0.2}, {"4", p4}}}};
}

// Ours decided with raw=true: the reference's answer with `answers` text substituted, plus raw.
std::string ours_text(const std::string& reference, double p4, const std::string& noul_p = "") {
  std::string s = reference.substr(0, reference.size() - 1);  // drop the closing brace
  s += R"(,"raw":{)"
       R"("q0":{"option_ids":["a.b","alpha"],"logits":[0.0,0.0],)"
       R"("probabilities":{"a.b":0.29582685,"alpha":0.70417315}},)"
       R"("q1":{"option_ids":["true","false"],"logits":[0.0,0.0],)"
       R"("probabilities":{"true":)" +
       (noul_p.empty() ? "0.38263997" : noul_p) +
       R"(,"false":0.61736003}},)"
       R"("q2":{"option_ids":["0","1","2","3","4"],"logits":[0.0,0.0,0.0,0.0,0.0],)"
       R"("probabilities":{"0":)" +
       json::python_float_repr(0.55 - p4) + R"(,"1":0.1,"2":0.15,"3":0.2,"4":)" +
       json::python_float_repr(p4) + "}}}}";
  return s;
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  if (at == std::string::npos) throw std::runtime_error("no '" + from + "' in " + s);
  return s.replace(at, from.size(), to);
}

bool any_contains(const std::vector<std::string>& lines, const std::string& needle) {
  for (const auto& l : lines)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

TEST(RoundedResponse, ExactMatchPasses) {
  const std::string ref = reference_text();
  // Our truncation note and the raw member are not part of the comparison.
  const std::string ours = replace(ours_text(ref, 0.4433628), R"("output_tokens":0})",
                                   R"("output_tokens":0,"truncated_state_tokens":7})");
  std::vector<std::string> accepted;
  const auto m = rounded_response_mismatches(parse(ours), parse(ref), reference_probs(), &accepted);
  EXPECT_TRUE(m.empty()) << testsupport::mismatch_lines(m);
  EXPECT_TRUE(accepted.empty());
}

TEST(RoundedResponse, OneUnitAcrossTheBoundaryPasses) {
  // Ours: score 1 + 4 * 0.4433622 = 2.7734488 -> 2.7734; the reference's 2.7734512 -> 2.7735.
  const std::string ref = reference_text("2.7735");
  const std::string ours = ours_text(reference_text("2.7734"), 0.4433622);
  std::vector<std::string> accepted;
  const auto m =
      rounded_response_mismatches(parse(ours), parse(ref), reference_probs(0.4433628), &accepted);
  EXPECT_TRUE(m.empty()) << testsupport::mismatch_lines(m);
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_NE(accepted[0].find("response.answers.q2.score"), std::string::npos) << accepted[0];

  // The same for a noul p: ours 0.38264999 -> 0.3826, the reference's 0.38265001 -> 0.3827.
  const std::string ref_n = replace(ref, R"("noul":0.3826)", R"("noul":0.3827)");
  ReferenceProbabilities probs = reference_probs(0.4433628);
  probs["q1"] = {{"true", 0.38265001}, {"false", 0.61734999}};
  const auto mn = rounded_response_mismatches(
      parse(ours_text(reference_text("2.7734"), 0.4433622, "0.38264999")), parse(ref_n), probs);
  EXPECT_TRUE(mn.empty()) << testsupport::mismatch_lines(mn);
}

TEST(RoundedResponse, OneUnitWithBothUnroundedOnOneSideFails) {
  // Both unrounded scores below 2.77345 (ours 2.7734488, the reference's 2.773449).
  const std::string ref = reference_text("2.7735");
  const std::string ours = ours_text(reference_text("2.7734"), 0.4433622);
  const auto m = rounded_response_mismatches(parse(ours), parse(ref), reference_probs(0.44336225));
  ASSERT_EQ(m.size(), 1u) << testsupport::mismatch_lines(m);
  EXPECT_NE(m[0].find("response.answers.q2.score"), std::string::npos) << m[0];
  EXPECT_NE(m[0].find("is not between the unrounded values"), std::string::npos) << m[0];
}

TEST(RoundedResponse, RoundedValueOnTheWrongSideOfItsOwnUnroundedFails) {
  // The unrounded values straddle 2.77345 but each side reports the other's rounding.
  const std::string ref = reference_text("2.7734");
  const std::string ours = ours_text(reference_text("2.7735"), 0.4433622);
  const auto m = rounded_response_mismatches(parse(ours), parse(ref), reference_probs(0.4433628));
  ASSERT_EQ(m.size(), 1u) << testsupport::mismatch_lines(m);
  EXPECT_NE(m[0].find("not its unrounded value rounded"), std::string::npos) << m[0];
}

TEST(RoundedResponse, TwoUnitsFail) {
  const std::string ref = reference_text("2.7735");
  const std::string ours = ours_text(reference_text("2.7733"), 0.4433622);
  const auto m = rounded_response_mismatches(parse(ours), parse(ref), reference_probs(0.4433628));
  ASSERT_EQ(m.size(), 1u) << testsupport::mismatch_lines(m);
  EXPECT_NE(m[0].find("2 units"), std::string::npos) << m[0];
}

TEST(RoundedResponse, DifferentChoiceFails) {
  const std::string ref = reference_text();
  const std::string ours =
      ours_text(replace(ref, R"("choice":"alpha")", R"("choice":"a.b")"), 0.4433628);
  const auto m = rounded_response_mismatches(parse(ours), parse(ref), reference_probs());
  ASSERT_EQ(m.size(), 1u) << testsupport::mismatch_lines(m);
  EXPECT_NE(m[0].find("response.answers.q0.choice"), std::string::npos) << m[0];
}

TEST(RoundedResponse, MissingExtraAndReorderedKeysFail) {
  const std::string ref = reference_text();
  auto m = rounded_response_mismatches(
      parse(ours_text(replace(ref, R"("confidence":0.7042,)", ""), 0.4433628)), parse(ref),
      reference_probs());
  ASSERT_EQ(m.size(), 1u) << testsupport::mismatch_lines(m);
  EXPECT_NE(m[0].find("response.answers.q0.confidence: missing from ours"), std::string::npos)
      << m[0];

  m = rounded_response_mismatches(
      parse(ours_text(replace(ref, R"("noul":0.3826)", R"("noul":0.3826,"x":1)"), 0.4433628)),
      parse(ref), reference_probs());
  EXPECT_TRUE(any_contains(m, "response.answers.q1.x: ours has it"))
      << testsupport::mismatch_lines(m);

  m = rounded_response_mismatches(parse(ours_text(replace(ref, R"("alpha":0.7042,"a.b":0.2958)",
                                                          R"("a.b":0.2958,"alpha":0.7042)"),
                                                  0.4433628)),
                                  parse(ref), reference_probs());
  EXPECT_TRUE(any_contains(m, "key order differs")) << testsupport::mismatch_lines(m);
}

TEST(RoundedResponse, IntegersKindsAndTheRawMemberAreChecked) {
  const std::string ref = reference_text();
  auto m = rounded_response_mismatches(
      parse(ours_text(replace(ref, R"("input_tokens":511)", R"("input_tokens":512)"), 0.4433628)),
      parse(ref), reference_probs());
  EXPECT_TRUE(any_contains(m, "response.usage.input_tokens")) << testsupport::mismatch_lines(m);

  // 1 (int) where the reference printed a float.
  m = rounded_response_mismatches(
      parse(ours_text(replace(ref, R"("3":0.2)", R"("3":1)"), 0.4433628)), parse(ref),
      reference_probs());
  EXPECT_TRUE(any_contains(m, "ours is int")) << testsupport::mismatch_lines(m);

  // Without raw the boundary exception cannot be judged, so it is refused outright.
  m = rounded_response_mismatches(parse(ref), parse(ref), reference_probs());
  EXPECT_TRUE(any_contains(m, "no raw member")) << testsupport::mismatch_lines(m);
}

}  // namespace
}  // namespace clef

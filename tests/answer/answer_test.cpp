// make_response against the reference: tests/golden/models/*.expected.jsonl hold, per request, the
// reference's fp32 option logits and its exact systemone() response. Feeding those logits through
// make_response must give that response exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "answer/answer.h"
#include "encoding/request.h"
#include "json/value.h"
#include "support/parse_json.h"

using clef::answer::make_response;
using clef::answer::softmax_f32;
using clef::encoding::EncodedRequest;
using clef::encoding::validate_request;
using clef::json::Value;

namespace {

using clef::testing::parse_or_die;

void check_model_fixture(const std::string& rel) {
  auto lines = clef::testing::read_jsonl(std::string(CLEF_SOURCE_DIR) + "/" + rel);
  ASSERT_FALSE(lines.empty());
  for (size_t n = 0; n < lines.size(); ++n) {
    const Value& line = lines[n];
    const Value& ref = *line.find("reference_fp32");
    auto req = validate_request(*line.find("request"));
    EncodedRequest enc;  // only its length reaches the response
    enc.input_ids.assign(static_cast<size_t>(*ref.find("input_tokens")->as_int64()), 0);
    std::vector<std::vector<float>> logits;
    for (const auto& q : req.questions) {
      const Value* row = ref.find("logits")->find(q.id);
      ASSERT_NE(row, nullptr);
      std::vector<float> l;
      for (const Value& x : row->items()) l.push_back(static_cast<float>(x.as_double()));
      logits.push_back(l);
    }
    Value got = make_response(req, enc, logits);
    EXPECT_EQ(clef::json::dumps(got), clef::json::dumps(*ref.find("response")))
        << rel << " line " << n + 1;

    // Unrounded probabilities: within 1 float32 ulp-ish of the reference's (its exp is vectorised).
    Value with_raw = make_response(req, enc, logits, true);
    for (const auto& q : req.questions) {
      const Value& mine = *with_raw.find("raw")->find(q.id)->find("probabilities");
      const Value& theirs = *ref.find("probabilities")->find(q.id);
      ASSERT_EQ(mine.members().size(), theirs.members().size());
      for (size_t i = 0; i < mine.members().size(); ++i) {
        EXPECT_EQ(mine.members()[i].first, theirs.members()[i].first);  // model order
        EXPECT_NEAR(mine.members()[i].second.as_double(), theirs.members()[i].second.as_double(),
                    1e-7);
      }
    }
  }
}

clef::encoding::ValidatedRequest validated(const std::string& text) {
  return validate_request(parse_or_die(text));
}

}  // namespace

TEST(AnswerGolden, TinyR2ReferenceResponses) {
  check_model_fixture("tests/golden/models/tiny-r2.expected.jsonl");
}

TEST(AnswerGolden, TinyR3ReferenceResponses) {
  check_model_fixture("tests/golden/models/tiny-r3.expected.jsonl");
}

TEST(Answer, SoftmaxFloat32) {
  auto p = softmax_f32({0.0f, 0.0f});
  EXPECT_EQ(p[0], 0.5f);
  EXPECT_EQ(p[1], 0.5f);
  p = softmax_f32({1000.0f, 0.0f});  // no overflow: max is subtracted
  EXPECT_EQ(p[0], 1.0f);
  EXPECT_EQ(p[1], 0.0f);
  EXPECT_EQ(softmax_f32({3.0f})[0], 1.0f);
}

TEST(Answer, ChoiceTieGoesToEarliestRequestKey) {
  // Model order is b, z (sorted); request order is z, b: a tie must answer z.
  auto req = validated(R"({"model":"m","state":null,"questions":{"q":{"type":"choice",
      "criteria":{"z":"last","b":"first"}}}})");
  EncodedRequest enc;
  enc.input_ids.assign(7, 0);
  Value r = make_response(req, enc, {{0.25f, 0.25f}});
  EXPECT_EQ(clef::json::dumps(r),
            R"({"model":"m","answers":{"q":{"type":"choice","choice":"z","confidence":0.5,)"
            R"("probabilities":{"z":0.5,"b":0.5}}},"usage":{"input_tokens":7,"output_tokens":0}})");
  // Not a tie: the higher one (b, logit index 0 in model order) wins.
  r = make_response(req, enc, {{1.0f, 0.0f}});
  EXPECT_EQ(r.find("answers")->find("q")->find("choice")->as_string(), "b");
}

TEST(Answer, ScoreNoulRawAndTruncation) {
  auto req = validated(R"({"model":"x","state":"s","questions":{
      "s":{"type":"score","criteria":["low",{"b":1,"a":2},null]},
      "n":{"type":"noul"},
      "one":{"type":"choice","criteria":{"only":null}}}})");
  EncodedRequest enc;
  enc.input_ids.assign(3, 0);
  enc.truncated_state_tokens = 5;
  // ln-probabilities of (0.25, 0.25, 0.5) and (0.75, 0.25)
  Value r =
      make_response(req, enc, {{0.0f, 0.0f, std::log(2.0f)}, {std::log(3.0f), 0.0f}, {9.0f}}, true);
  // score = 0*0.25 + 1*0.25 + 2*0.5; legend values are the criteria, unchanged (member order too).
  EXPECT_EQ(
      clef::json::dumps(*r.find("answers")),
      R"({"s":{"type":"score","score":1.25,"confidence":0.5,)"
      R"("legend":{"0":"low","1":{"b":1,"a":2},"2":null},)"
      R"("probabilities":{"0":0.25,"1":0.25,"2":0.5}},)"
      R"("n":{"type":"noul","noul":0.75},)"
      R"("one":{"type":"choice","choice":"only","confidence":1.0,"probabilities":{"only":1.0}}})");
  EXPECT_EQ(clef::json::dumps(*r.find("usage")),
            R"({"input_tokens":3,"output_tokens":0,"truncated_state_tokens":5})");
  const Value& raw_n = *r.find("raw")->find("n");
  EXPECT_EQ(clef::json::dumps(*raw_n.find("option_ids")), R"(["true","false"])");
  EXPECT_EQ(raw_n.find("logits")->items()[0].as_double(), static_cast<double>(std::log(3.0f)));
  EXPECT_NEAR(raw_n.find("probabilities")->find("true")->as_double(), 0.75, 1e-6);  // unrounded
}

TEST(Answer, RoundingUsesPythonRules) {
  auto req = validated(R"({"model":"m","state":1,"questions":{"q":{"type":"noul"}}})");
  EncodedRequest enc;
  // p(true) = sigmoid(l); pick l so p lands near 4-decimal boundaries and compare with
  // python_round.
  for (float l : {-3.0f, -0.123f, 0.0f, 0.5f, 2.0f, 7.5f}) {
    Value r = make_response(req, enc, {{l, 0.0f}});
    float p = softmax_f32({l, 0.0f})[0];
    EXPECT_EQ(r.find("answers")->find("q")->find("noul")->as_double(),
              clef::json::python_round(static_cast<double>(p), 4));
  }
}

TEST(Answer, NonFiniteIsAnError) {
  auto req = validated(R"({"model":"m","state":1,"questions":{"q":{"type":"noul"}}})");
  EncodedRequest enc;
  EXPECT_THROW(make_response(req, enc, {{NAN, 0.0f}}), std::runtime_error);
  EXPECT_THROW(make_response(req, enc, {{INFINITY, 0.0f}}), std::runtime_error);
  EXPECT_THROW(make_response(req, enc, {{-INFINITY, -INFINITY}}), std::runtime_error);
  EXPECT_THROW(make_response(req, enc, {{0.0f}}), std::invalid_argument);  // wrong count
  EXPECT_THROW(make_response(req, enc, {{0.0f, 0.0f}, {}}), std::invalid_argument);
}

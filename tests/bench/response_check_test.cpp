// The schema check inside the bench's clock: every way a 200 body can be wrong is an invalid_body.
#include <gtest/gtest.h>

#include "bench/manifest.h"
#include "bench/response_check.h"

namespace clef::bench {
namespace {

using Json = nlohmann::ordered_json;

Item three_question_item() {
  const char* line =
      R"({"id": "x", "request": {"model": "m", "state": "s", "questions": {)"
      R"("n": {"type": "noul"}, "c": {"type": "choice", "criteria": {"b": "B", "a": "A"}}, )"
      R"("s": {"type": "score", "criteria": ["0", "1", "2"]}}}})";
  return parse_manifest(line, "m", {}).items[0];
}

Json valid_body() {
  return Json::parse(
      R"({"model": "m", "answers": {"n": {"type": "noul", "noul": 0.25},)"
      R"( "c": {"type": "choice", "choice": "a", "confidence": 0.6, "probabilities": {"b": 0.4, "a": 0.6}},)"
      R"( "s": {"type": "score", "score": 1.1, "confidence": 0.5, "legend": {"0": "0", "1": "1", "2": "2"},)"
      R"( "probabilities": {"0": 0.2, "1": 0.5, "2": 0.3}}}, "usage": {"input_tokens": 42, "output_tokens": 0}})");
}

std::string why(const Json& body) {
  return check_response(three_question_item(), body.dump(), nullptr);
}

TEST(ResponseCheck, AcceptsAValidAnswer) {
  CheckedResponse out;
  EXPECT_EQ(check_response(three_question_item(), valid_body().dump(), &out), "");
  EXPECT_EQ(out.input_tokens, 42);
  EXPECT_EQ(out.answers["c"]["choice"], "a");
}

TEST(ResponseCheck, SumToleranceIsTwoThousandths) {
  Json b = valid_body();
  b["answers"]["s"]["probabilities"]["1"] = 0.5019;  // sum 1.0019: inside
  EXPECT_EQ(why(b), "");
  b["answers"]["s"]["probabilities"]["1"] = 0.5021;  // sum 1.0021: outside
  EXPECT_NE(why(b).find("sum to"), std::string::npos);
}

TEST(ResponseCheck, RefusesEachKindOfBadBody) {
  EXPECT_NE(check_response(three_question_item(), "{\"model\": ", nullptr).find("not JSON"),
            std::string::npos);
  EXPECT_NE(check_response(three_question_item(), "[]", nullptr).find("not a JSON object"),
            std::string::npos);
  auto expect_bad = [](Json b, const char* fragment) {
    const std::string w = why(b);
    EXPECT_NE(w.find(fragment), std::string::npos) << "got: '" << w << "' for " << b.dump();
  };
  Json b = valid_body();
  b["model"] = "other";
  expect_bad(b, "model is not echoed");
  b = valid_body();
  b["answers"].erase("s");
  expect_bad(b, "2 answers for 3 questions");
  b = valid_body();
  Json reordered = Json::object();
  reordered["c"] = b["answers"]["c"];
  reordered["n"] = b["answers"]["n"];
  reordered["s"] = b["answers"]["s"];
  b["answers"] = reordered;
  expect_bad(b, "(order)");
  b = valid_body();
  b["answers"]["n"]["noul"] = 1.5;
  expect_bad(b, "noul is not a finite number in [0, 1]");
  b = valid_body();
  b["answers"]["n"]["type"] = "choice";
  expect_bad(b, "type is not \"noul\"");
  b = valid_body();
  b["answers"]["c"]["probabilities"].erase("b");
  expect_bad(b, "1 probabilities for 2 options");
  b = valid_body();
  b["answers"]["c"]["probabilities"] = Json::parse(R"({"b": 0.4, "z": 0.6})");
  expect_bad(b, "no probability for option 'a'");
  b = valid_body();
  b["answers"]["c"]["probabilities"]["a"] = -0.1;
  expect_bad(b, "not a finite number in [0, 1]");
  b = valid_body();
  b["answers"]["c"]["choice"] = "q";
  expect_bad(b, "is not an option");
  b = valid_body();
  b["answers"]["s"]["score"] = 2.5;
  expect_bad(b, "score is not a finite number");
  b = valid_body();
  b["answers"]["s"]["probabilities"]["1"] = "0.5";
  expect_bad(b, "probability of '1'");
  b = valid_body();
  b["usage"].erase("input_tokens");
  expect_bad(b, "usage.input_tokens");
  // A huge exponent parses to infinity: still refused.
  std::string text = valid_body().dump();
  text.replace(text.find("0.25"), 4, "1e999");
  EXPECT_NE(check_response(three_question_item(), text, nullptr), "");
}

}  // namespace
}  // namespace clef::bench

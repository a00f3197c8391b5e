// encode_request rules beyond the fixtures: the project's truncation policy, refusals, rendering.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "encoding/encode.h"
#include "encoding/render.h"
#include "encoding/request.h"
#include "json/value.h"
#include "support/parse_json.h"
#include "tokenizer/tokenizer.h"

using clef::encoding::encode_request;
using clef::encoding::EncodedRequest;
using clef::encoding::EncodeOptions;
using clef::encoding::RequestError;
using clef::encoding::Truncation;
using clef::encoding::validate_request;
using clef::json::Value;
using clef::tokenizer::Tokenizer;

namespace {

const Tokenizer& tok() {
  static const Tokenizer t =
      Tokenizer::load(std::string(CLEF_SOURCE_DIR) + "/tests/golden/tokenizers/tiny-bpe");
  return t;
}

using clef::testing::parse_or_die;

EncodedRequest enc(const std::string& body, int max_length = 16384,
                   Truncation t = Truncation::Error) {
  EncodeOptions o;
  o.max_length = max_length;
  o.truncation = t;
  return encode_request(validate_request(parse_or_die(body)), tok(), o);
}

RequestError refusal(const std::string& body, int max_length = 16384,
                     Truncation t = Truncation::Error) {
  try {
    enc(body, max_length, t);
  } catch (const RequestError& e) {
    return e;
  }
  return RequestError({{}, "", "ACCEPTED"});
}

const std::string kState = "the checkout page fails for every customer since this morning";
const std::string kBody = R"({"model":"m","state":")" + kState +
                          R"(","questions":{"q":{"type":"choice","criteria":{"b":"B","a":null}}}})";

}  // namespace

TEST(Render, StringsRawOthersPythonJson) {
  using clef::encoding::render;
  EXPECT_EQ(render(parse_or_die(R"("a \"quoted\"\nline")")), "a \"quoted\"\nline");
  EXPECT_EQ(render(parse_or_die(R"({"b":[1,2.50,null],"a":"\u00e9"})")),
            "{\"a\":\"\xC3\xA9\",\"b\":[1,2.5,null]}");
  EXPECT_EQ(render(parse_or_die("null")), "null");
  EXPECT_EQ(render(parse_or_die("1e5")), "100000.0");
  EXPECT_EQ(clef::encoding::render_option("billing", Value::string("Payments")),
            R"({"description":"Payments","option_id":"billing"})");
  EXPECT_EQ(clef::encoding::render_option("x", Value::null()), R"({"option_id":"x"})");
  EXPECT_EQ(clef::encoding::render_option("0", parse_or_die(R"({"z":1,"a":[true]})")),
            R"({"description":{"a":[true],"z":1},"option_id":"0"})");
}

TEST(Encode, SpansPointAtTheirPieces) {
  EncodedRequest e = enc(kBody);
  ASSERT_EQ(e.questions.size(), 1u);
  const auto& q = e.questions[0];
  EXPECT_EQ(q.option_ids, (std::vector<std::string>{"a", "b"}));  // model order
  auto text = [&](clef::encoding::Span s) {
    std::vector<int32_t> ids(e.input_ids.begin() + s.start, e.input_ids.begin() + s.end);
    return tok().decode(ids);
  };
  EXPECT_EQ(text(q.question_span), "q");  // no instructions: the id
  EXPECT_EQ(text(q.option_spans[0]), R"({"option_id":"a"})");
  EXPECT_EQ(text(q.option_spans[1]), R"({"description":"B","option_id":"b"})");
  EXPECT_EQ(e.truncated_state_tokens, 0);
  EXPECT_EQ(e.state_tokens, static_cast<int32_t>(tok().encode(kState).size()));
  // The sequence ends exactly at "DECISIONS:".
  std::string all = tok().decode(e.input_ids);
  EXPECT_EQ(all.substr(all.size() - 10), "DECISIONS:");
}

TEST(Encode, TruncationErrorRefusesWithCounts) {
  EncodedRequest full = enc(kBody);
  const int state = full.state_tokens;
  ASSERT_GT(state, 5);
  const int fixed = static_cast<int>(full.input_ids.size()) - state;
  // Exactly fits.
  EXPECT_EQ(enc(kBody, fixed + state).input_ids, full.input_ids);
  // One token short.
  RequestError e = refusal(kBody, fixed + state - 1);
  EXPECT_EQ(e.status, 422);
  EXPECT_EQ(e.error.type, "state_too_long");
  EXPECT_EQ(e.error.loc, (std::vector<std::string>{"body", "state"}));
  EXPECT_NE(e.error.msg.find(std::to_string(state) + " tokens"), std::string::npos) << e.error.msg;
  EXPECT_NE(e.error.msg.find("only " + std::to_string(state - 1) + " fit"), std::string::npos)
      << e.error.msg;
  // Schema too long beats everything else.
  e = refusal(kBody, fixed - 1, Truncation::Allow);
  EXPECT_EQ(e.error.type, "schema_too_long");
  EXPECT_EQ(e.error.msg, "schema requires " + std::to_string(fixed) +
                             " tokens before state; maximum is " + std::to_string(fixed - 1));
}

TEST(Encode, TruncationAllowCutsTheStateEnd) {
  EncodedRequest full = enc(kBody);
  const int state = full.state_tokens;
  const int fixed = static_cast<int>(full.input_ids.size()) - state;
  const std::vector<int32_t> state_ids = tok().encode(kState);
  auto at =
      std::search(full.input_ids.begin(), full.input_ids.end(), state_ids.begin(), state_ids.end());
  ASSERT_NE(at, full.input_ids.end());
  const int prefix = static_cast<int>(at - full.input_ids.begin());
  for (int keep : {state - 1, 3, 0}) {
    EncodedRequest cut = enc(kBody, fixed + keep, Truncation::Allow);
    EXPECT_EQ(cut.state_tokens, keep);
    EXPECT_EQ(cut.truncated_state_tokens, state - keep);
    // prefix ++ the FIRST `keep` state tokens ++ the unchanged schema and suffix.
    std::vector<int32_t> want(full.input_ids.begin(), full.input_ids.begin() + prefix + keep);
    want.insert(want.end(), full.input_ids.begin() + prefix + state, full.input_ids.end());
    EXPECT_EQ(cut.input_ids, want);
    // Spans move back by the number of tokens cut.
    EXPECT_EQ(cut.questions[0].question_span.start,
              full.questions[0].question_span.start - (state - keep));
    EXPECT_EQ(cut.questions[0].option_spans[1].end,
              full.questions[0].option_spans[1].end - (state - keep));
  }
  // The request's own "truncation" overrides the default.
  const std::string allow = R"({"truncation":"allow",)" + kBody.substr(1);
  EXPECT_EQ(enc(allow, fixed + 2, Truncation::Error).truncated_state_tokens, state - 2);
  const std::string error = R"({"truncation":"error",)" + kBody.substr(1);
  EXPECT_EQ(refusal(error, fixed + 2, Truncation::Allow).error.type, "state_too_long");
}

TEST(Encode, QuestionWithNoTokensRefused) {
  RequestError e = refusal(R"({"model":"m","state":"s","questions":{"":{"type":"noul"}}})");
  EXPECT_EQ(e.status, 422);
  EXPECT_EQ(e.error.loc, (std::vector<std::string>{"body", "questions", "", "instructions"}));
  EXPECT_EQ(
      refusal(R"({"model":"m","state":"s","questions":{"":{"type":"noul","instructions":""}}})")
          .error.type,
      "value_error");
  // An empty id with instructions is fine.
  EXPECT_EQ(enc(R"({"model":"m","state":"s","questions":{"":{"type":"noul","instructions":"x"}}})")
                .questions.size(),
            1u);
  // Empty state: zero state tokens is fine.
  EXPECT_EQ(enc(R"({"model":"m","state":"","questions":{"q":{"type":"noul"}}})").state_tokens, 0);
}

TEST(Encode, LoneSurrogatesRefused) {
  RequestError e =
      refusal(R"({"model":"m","state":"bad \ud800","questions":{"q":{"type":"noul"}}})");
  EXPECT_EQ(e.error.loc, (std::vector<std::string>{"body", "state"}));
  e = refusal(R"({"model":"m","state":{"k\udfff":1},"questions":{"q":{"type":"noul"}}})");
  EXPECT_EQ(e.error.loc, (std::vector<std::string>{"body", "state"}));
  e = refusal(R"({"model":"m","state":"s","questions":{"q\ud800":{"type":"noul"}}})");
  EXPECT_EQ(e.error.loc.at(1), "questions");
  // The id is quoted back with the surrogate escaped, so the error itself stays valid UTF-8.
  EXPECT_EQ(e.error.loc.at(2), "q\\ud800");
  e = refusal(
      R"({"model":"m","state":"s","questions":{"q":{"type":"choice","criteria":{"\udc00":1}}}})");
  EXPECT_EQ(e.error.loc, (std::vector<std::string>{"body", "questions", "q", "criteria"}));
  e = refusal(
      R"({"model":"m","state":"s","questions":{"q":{"type":"noul","instructions":["\ud800"]}}})");
  EXPECT_EQ(e.error.loc, (std::vector<std::string>{"body", "questions", "q", "instructions"}));
  // A surrogate in a key the reference ignores (noul criteria other than true/false) is harmless.
  EXPECT_EQ(
      enc(R"({"model":"m","state":"s","questions":{"q":{"type":"noul","criteria":{"\ud800":1}}}})")
          .questions.size(),
      1u);
}

TEST(Render, EscapeSurrogates) {
  using clef::encoding::escape_surrogates;
  EXPECT_EQ(escape_surrogates("plain \xC3\xA9"), "plain \xC3\xA9");
  EXPECT_EQ(escape_surrogates("a\xED\xA0\x80"
                              "b\xED\xBF\xBF"),
            "a\\ud800b\\udfff");
  EXPECT_EQ(escape_surrogates("\xED\x9F\xBF"), "\xED\x9F\xBF");  // U+D7FF is no surrogate
}

TEST(Encode, EncodedToJsonFormat) {
  EncodedRequest e;
  e.input_ids = {5, 6, 7};
  clef::encoding::EncodedQuestion q;
  q.id = "q";
  q.type = clef::encoding::QuestionType::Score;
  q.question_span = {1, 2};
  q.option_spans = {{2, 3}};
  q.option_ids = {"0"};
  e.questions.push_back(q);
  EXPECT_EQ(clef::json::dumps(clef::encoding::encoded_to_json(e)),
            R"({"input_ids":[5,6,7],"questions":[{"id":"q","type":2,"question_span":[1,2],)"
            R"("option_spans":[[2,3]],"option_ids":["0"]}]})");
}

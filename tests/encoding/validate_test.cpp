// validate_request: the reference's checks in its order (docs/spec/encoding.md §5), the project's
// tightenings (§2) and limits (protocol.md). No tokenizer needed.
#include <gtest/gtest.h>

#include <string>

#include "encoding/request.h"
#include "json/value.h"
#include "support/parse_json.h"

using clef::encoding::Limits;
using clef::encoding::QuestionType;
using clef::encoding::RequestError;
using clef::encoding::Truncation;
using clef::encoding::validate_request;
using clef::encoding::ValidatedRequest;
using clef::json::Value;

namespace {

using clef::testing::parse_or_die;

ValidatedRequest ok(const std::string& text, const Limits& limits = {}) {
  return validate_request(parse_or_die(text), limits);
}

// The refusal for `text`, or a FieldError with type "ACCEPTED" when it was not refused.
RequestError refusal(const std::string& text, const Limits& limits = {}) {
  try {
    validate_request(parse_or_die(text), limits);
  } catch (const RequestError& e) {
    return e;
  }
  return RequestError({{}, "", "ACCEPTED"});
}

std::string loc(const RequestError& e) {
  std::string s;
  for (const auto& part : e.error.loc) s += (s.empty() ? "" : "/") + part;
  return s;
}

const std::string kQ = R"("questions":{"q":{"type":"noul"}})";

}  // namespace

TEST(Validate, BodyMustBeAnObject) {
  for (const char* body : {"[]", "\"x\"", "null", "3", "[{\"model\":\"m\"}]"}) {
    RequestError e = refusal(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(loc(e), "body");
  }
}

TEST(Validate, ModelAndState) {
  RequestError e = refusal(R"({"state":"s",)" + kQ + "}");
  EXPECT_EQ(e.status, 422);
  EXPECT_EQ(loc(e), "body/model");
  EXPECT_EQ(e.error.type, "missing");
  EXPECT_EQ(e.error.msg, "model and state are required");
  e = refusal(R"({"model":3,"state":"s",)" + kQ + "}");
  EXPECT_EQ(loc(e), "body/model");
  EXPECT_EQ(e.error.type, "string_type");
  e = refusal(R"({"model":"m",)" + kQ + "}");
  EXPECT_EQ(loc(e), "body/state");
  // Checked before questions (reference order).
  EXPECT_EQ(loc(refusal(R"({"model":"m"})")), "body/state");
  // null state is allowed and kept.
  ValidatedRequest r = ok(R"({"model":"clef","state":null,)" + kQ + "}");
  EXPECT_EQ(r.model, "clef");
  EXPECT_TRUE(r.state.is_null());
  EXPECT_EQ(loc(refusal(R"({"model":"\ud800","state":1,)" + kQ + "}")), "body/model");
}

TEST(Validate, QuestionsNonEmptyObject) {
  for (const char* qs : {"", R"(,"questions":{})", R"(,"questions":null)", R"(,"questions":[])"}) {
    RequestError e = refusal(std::string(R"({"model":"m","state":"s")") + qs + "}");
    EXPECT_EQ(loc(e), "body/questions") << qs;
    EXPECT_EQ(e.error.msg, "at least one question is required");
  }
  RequestError e = refusal(R"({"model":"m","state":"s","questions":[{"type":"noul"}]})");
  EXPECT_EQ(loc(e), "body/questions");
  EXPECT_EQ(e.error.type, "dict_type");
}

TEST(Validate, QuestionTypeThenCriteriaPerQuestionInOrder) {
  RequestError e = refusal(R"({"model":"m","state":"s","questions":{"q":{"type":"boolean"}}})");
  EXPECT_EQ(loc(e), "body/questions/q/type");
  EXPECT_EQ(e.error.msg, "q: type must be noul, choice, or score");
  EXPECT_EQ(loc(refusal(R"({"model":"m","state":"s","questions":{"q":{}}})")),
            "body/questions/q/type");
  for (const char* q : {R"({"type":"choice","criteria":{}})", R"({"type":"score","criteria":[]})",
                        R"({"type":"choice"})", R"({"type":"score","criteria":null})",
                        R"({"type":"choice","criteria":""})"}) {
    e = refusal(std::string(R"({"model":"m","state":"s","questions":{"q":)") + q + "}}");
    EXPECT_EQ(loc(e), "body/questions/q/criteria") << q;
    EXPECT_EQ(e.error.msg, "q: criteria must not be empty") << q;
  }
  // Both checks of a question run before the next question's.
  e = refusal(R"({"model":"m","state":"s","questions":{"a":{"type":"choice"},"b":{"type":"x"}}})");
  EXPECT_EQ(loc(e), "body/questions/a/criteria");
  // Malformed criteria fail when the schema is built, after every question's type check.
  e = refusal(
      R"({"model":"m","state":"s","questions":{"a":{"type":"choice","criteria":[1]},"b":{"type":"x"}}})");
  EXPECT_EQ(loc(e), "body/questions/b/type");
}

TEST(Validate, Tightenings) {
  const char* bad[] = {
      R"("q":3)",
      R"("q":["noul"])",
      R"("q":{"type":"noul","criteria":[["true","x"]]})",
      R"("q":{"type":"noul","criteria":"yes"})",
      R"("q":{"type":"choice","criteria":["a","b"]})",
      R"("q":{"type":"choice","criteria":"ab"})",
      R"("q":{"type":"score","criteria":{"a":1}})",
      R"("q":{"type":"score","criteria":"abc"})",
  };
  for (const char* q : bad) {
    RequestError e = refusal(std::string(R"({"model":"m","state":"s","questions":{)") + q + "}}");
    EXPECT_EQ(e.status, 422) << q;
    EXPECT_EQ(e.error.loc.at(2), "q") << q;
    EXPECT_NE(e.error.type, "ACCEPTED") << q;
  }
}

TEST(Validate, NoulOptions) {
  const std::string d_true = "The proposition is true or the answer is yes.";
  const std::string d_false = "The proposition is false or the answer is no.";
  ValidatedRequest r = ok(R"({"model":"m","state":"s","questions":{
      "n0":{"type":"noul"},"n1":{"type":"noul","criteria":[]},"n2":{"type":"noul","criteria":""},
      "n3":{"type":"noul","criteria":false},"n4":{"type":"noul","criteria":{}},
      "n5":{"type":"noul","criteria":0},"n6":{"type":"noul","criteria":null},
      "n7":{"type":"noul","criteria":{"true":null,"maybe":"x"}},
      "n8":{"type":"noul","criteria":{"false":{"b":1},"true":"Yes."}}}})");
  ASSERT_EQ(r.questions.size(), 9u);
  for (size_t i = 0; i < 7; ++i) {
    const auto& q = r.questions[i];
    EXPECT_EQ(q.type, QuestionType::Noul);
    ASSERT_EQ(q.options.size(), 2u);
    EXPECT_EQ(q.options[0].id, "true");
    EXPECT_EQ(q.options[1].id, "false");
    EXPECT_EQ(q.options[0].description.as_string(), d_true) << q.id;
    EXPECT_EQ(q.options[1].description.as_string(), d_false) << q.id;
  }
  EXPECT_TRUE(r.questions[7].options[0].description.is_null());
  EXPECT_EQ(r.questions[7].options[1].description.as_string(), d_false);
  EXPECT_EQ(r.questions[8].options[0].description.as_string(), "Yes.");
  EXPECT_TRUE(r.questions[8].options[1].description.is_object());
}

TEST(Validate, ChoiceModelOrderAndRequestOrder) {
  ValidatedRequest r = ok(R"({"model":"m","state":"s","questions":{"q":{"type":"choice",
      "criteria":{"9":"nine","10":null,"unknown":1,"1":"one","\ud83d\ude00":"e","\uffff":"f","\ue000":"g"}}}})");
  const auto& q = r.questions[0];
  std::vector<std::string> ids;
  for (const auto& o : q.options) ids.push_back(o.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"1", "10", "9", "unknown", "\xEE\x80\x80",
                                           "\xEF\xBF\xBF", "\xF0\x9F\x98\x80"}));
  std::vector<std::string> req_order;
  for (size_t i : q.request_order) req_order.push_back(q.options.at(i).id);
  EXPECT_EQ(req_order, (std::vector<std::string>{"9", "10", "unknown", "1", "\xF0\x9F\x98\x80",
                                                 "\xEF\xBF\xBF", "\xEE\x80\x80"}));
  EXPECT_EQ(q.options[0].description.as_string(), "one");
  EXPECT_TRUE(q.options[1].description.is_null());
  // A one-option choice is valid.
  EXPECT_EQ(
      ok(R"({"model":"m","state":"s","questions":{"q":{"type":"choice","criteria":{"a":1}}}})")
          .questions[0]
          .options.size(),
      1u);
}

TEST(Validate, ScoreOptionsAndInstructions) {
  ValidatedRequest r = ok(R"({"model":"m","state":"s","questions":{"q":{"type":"score",
      "instructions":{"x":1},"criteria":["low",null,{"b":1}]}}})");
  const auto& q = r.questions[0];
  ASSERT_EQ(q.options.size(), 3u);
  EXPECT_EQ(q.options[0].id, "0");
  EXPECT_EQ(q.options[2].id, "2");
  EXPECT_TRUE(q.options[1].description.is_null());
  EXPECT_EQ(q.request_order, (std::vector<size_t>{0, 1, 2}));
  EXPECT_TRUE(q.instructions.is_object());
  EXPECT_EQ(q.criteria.items().size(), 3u);
}

TEST(Validate, DuplicateQuestionKeysFollowDictSemantics) {
  ValidatedRequest r = ok(R"({"model":"m","state":"s","questions":{"a":{"type":"noul"},
      "b":{"type":"noul","instructions":"B"},"a":{"type":"choice","criteria":{"x":1,"y":2}}}})");
  ASSERT_EQ(r.questions.size(), 2u);
  EXPECT_EQ(r.questions[0].id, "a");
  EXPECT_EQ(r.questions[0].type, QuestionType::Choice);
  EXPECT_EQ(r.questions[1].id, "b");
}

TEST(Validate, TruncationThinkingMedia) {
  EXPECT_FALSE(ok(R"({"model":"m","state":"s",)" + kQ + "}").truncation.has_value());
  EXPECT_EQ(ok(R"({"model":"m","state":"s","truncation":"allow",)" + kQ + "}").truncation,
            Truncation::Allow);
  EXPECT_EQ(ok(R"({"model":"m","state":"s","truncation":"error",)" + kQ + "}").truncation,
            Truncation::Error);
  for (const char* t : {R"("ALLOW")", "1", "true", R"(["allow"])"})
    EXPECT_EQ(
        loc(refusal(std::string(R"({"model":"m","state":"s","truncation":)") + t + "," + kQ + "}")),
        "body/truncation")
        << t;
  ok(R"({"model":"m","state":"s","thinking":{"enabled":false},)" + kQ + "}");
  ok(R"({"model":"m","state":"s","thinking":null,)" + kQ + "}");
  RequestError e = refusal(R"({"model":"m","state":"s","thinking":{"enabled":true},)" + kQ + "}");
  EXPECT_EQ(e.status, 422);
  EXPECT_EQ(loc(e), "body/thinking/enabled");
  EXPECT_EQ(loc(refusal(R"({"model":"m","state":"s","thinking":true,)" + kQ + "}")),
            "body/thinking");
  ok(R"({"model":"m","state":"s","images":[],"videos":null,)" + kQ + "}");
  // Media fields are validated here; their files are decoded by the encoder.
  EXPECT_EQ(loc(refusal(R"({"model":"m","state":"s","images":[7],)" + kQ + "}")), "body/images/0");
  EXPECT_EQ(loc(refusal(R"({"model":"m","state":"s","videos":[{}],)" + kQ + "}")),
            "body/videos/0/frames");
  EXPECT_EQ(loc(refusal(R"({"model":"m","state":"s","images":"x",)" + kQ + "}")), "body/images");
  // Unknown keys are ignored, as in the reference.
  ok(R"({"model":"m","state":"s","temperature":0.2,)" + kQ + "}");
}

TEST(Validate, Limits) {
  auto questions = [](int n, const std::string& q) {
    std::string s = R"({"model":"m","state":"s","questions":{)";
    for (int i = 0; i < n; ++i) s += (i ? ",\"q" : "\"q") + std::to_string(i) + "\":" + q;
    return s + "}}";
  };
  const std::string noul = R"({"type":"noul"})";
  EXPECT_EQ(ok(questions(64, noul)).questions.size(), 64u);
  RequestError e = refusal(questions(65, noul));
  EXPECT_EQ(loc(e), "body/questions");
  EXPECT_EQ(e.error.type, "too_many_questions");

  auto choice = [](int n) {
    std::string s = R"({"type":"choice","criteria":{)";
    for (int i = 0; i < n; ++i) s += (i ? ",\"o" : "\"o") + std::to_string(i) + "\":null";
    return s + "}}";
  };
  EXPECT_EQ(ok(questions(1, choice(255))).questions[0].options.size(), 255u);
  e = refusal(questions(1, choice(256)));
  EXPECT_EQ(loc(e), "body/questions/q0/criteria");
  EXPECT_EQ(e.error.type, "too_many_options");
  EXPECT_EQ(ok(questions(8, choice(255))).questions.size(), 8u);  // 2040 options
  e = refusal(questions(9, choice(255)));                         // 2295 options
  EXPECT_EQ(loc(e), "body/questions");
  EXPECT_EQ(e.error.type, "too_many_options");

  // Question id length counts code points: 256 x "é" (512 bytes) is fine, 257 is not.
  std::string id256, id257;
  for (int i = 0; i < 256; ++i) id256 += "\xC3\xA9";
  id257 = id256 + "x";
  ok(R"({"model":"m","state":"s","questions":{")" + id256 + "\":" + noul + "}}");
  e = refusal(R"({"model":"m","state":"s","questions":{")" + id257 + "\":" + noul + "}}");
  EXPECT_EQ(e.error.type, "string_too_long");
  // An empty id is valid at this stage (the encoder refuses it only when it renders to no tokens).
  ok(R"({"model":"m","state":"s","questions":{"":{"type":"noul","instructions":"x"}}})");

  Limits tight;
  tight.max_questions = 1;
  EXPECT_EQ(refusal(questions(2, noul), tight).error.type, "too_many_questions");
}

// docs/spec/protocol.md: images/videos absent, null or [] → a text request (the edge fixture sends
// "images":[],"videos":null); any other type → 422 list_type, never silently ignored; a list's
// malformed items are refused naming the item (docs/spec/media.md §1).
TEST(Validate, MediaOtherThanAbsentNullOrEmptyListIsRefused) {
  ok(R"({"model":"m","state":"s",)" + kQ + "}");
  ok(R"({"model":"m","state":"s","images":null,"videos":[],)" + kQ + "}");
  for (const char* field : {"images", "videos"}) {
    for (const char* value :
         {R"("")", "0", "false", "{}", "0.0", R"("x")", "true", "1", R"({"a":1})"}) {
      const std::string body =
          std::string(R"({"model":"m","state":"s",")") + field + "\":" + value + "," + kQ + "}";
      RequestError e = refusal(body);
      EXPECT_EQ(e.status, 422) << body;
      EXPECT_EQ(loc(e), std::string("body/") + field) << body;
      EXPECT_EQ(e.error.type, "list_type") << body;
      EXPECT_NE(e.error.msg.find(field), std::string::npos) << e.error.msg;
    }
    for (const char* value : {"[null]", "[[]]", R"([""])", "[7]"}) {
      const std::string body =
          std::string(R"({"model":"m","state":"s",")") + field + "\":" + value + "," + kQ + "}";
      RequestError e = refusal(body);
      EXPECT_EQ(e.status, 422) << body;
      EXPECT_EQ(loc(e), std::string("body/") + field + "/0") << body;
    }
  }
  // Validation reads the fields; the files are the encoder's to decode.
  const ValidatedRequest r =
      ok(R"({"model":"m","state":"s","images":["a","b"],"videos":[{"frames":["c","d"],)"
         R"("fps":30}],"media_kwargs":{"fps":null,"num_frames":6},)" +
         kQ + "}");
  EXPECT_EQ(r.images, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(r.videos.size(), 1u);
  EXPECT_EQ(r.videos[0].frames, (std::vector<std::string>{"c", "d"}));
  EXPECT_EQ(r.videos[0].fps, 30.0);
  EXPECT_TRUE(r.media_kwargs.fps_null);
  EXPECT_EQ(r.media_kwargs.num_frames, 6);
}

// Media limits and media_kwargs rules (docs/spec/media.md §1).
TEST(Validate, MediaLimitsAndKwargs) {
  auto body = [](const std::string& extra) {
    return R"({"model":"m","state":"s",)" + extra + "," + kQ + "}";
  };
  Limits tight;
  tight.max_images = 1;
  tight.max_videos = 1;
  tight.max_video_frames = 3;
  EXPECT_EQ(refusal(body(R"("images":["a","b"])"), tight).error.type, "too_many_images");
  EXPECT_EQ(
      refusal(body(R"("videos":[{"frames":["a","b"]},{"frames":["a","b"]}])"), tight).error.type,
      "too_many_videos");
  EXPECT_EQ(refusal(body(R"("videos":[{"frames":["a","b","c","d"]}])"), tight).error.type,
            "too_many_frames");
  EXPECT_EQ(loc(refusal(body(R"("videos":[{"frames":["a"]}])"))), "body/videos/0/frames");
  EXPECT_EQ(loc(refusal(body(R"("videos":[{"frames":["a","b"],"fps":0}])"))), "body/videos/0/fps");
  EXPECT_EQ(loc(refusal(body(R"("videos":[{"frames":["a","b"],"rate":2}])"))),
            "body/videos/0/rate");
  // The data form passes validation (the file is probed when the request is encoded); it takes
  // no frames or fps beside it, and its data is a non-empty string.
  ok(body(R"("videos":[{"data":"data:video/mp4;base64,AAAA"}])"));
  EXPECT_EQ(loc(refusal(body(R"("videos":[{"data":"AAAA","fps":2}])"))), "body/videos/0/fps");
  EXPECT_EQ(loc(refusal(body(R"("videos":[{"data":"AAAA","frames":["a","b"]}])"))),
            "body/videos/0/frames");
  EXPECT_EQ(loc(refusal(body(R"("videos":[{"data":""}])"))), "body/videos/0/data");
  EXPECT_EQ(loc(refusal(body(R"("videos":[{"data":7}])"))), "body/videos/0/data");
  ok(body(R"("media_kwargs":{"min_pixels":4096,"max_pixels":65536,"fps":1.5})"));
  ok(body(R"("media_kwargs":null)"));
  EXPECT_EQ(loc(refusal(body(R"("media_kwargs":{"min_pixels":4096})"))),
            "body/media_kwargs/max_pixels");
  EXPECT_EQ(loc(refusal(body(R"("media_kwargs":{"max_pixels":4096})"))),
            "body/media_kwargs/min_pixels");
  EXPECT_EQ(loc(refusal(body(R"("media_kwargs":{"min_pixels":9,"max_pixels":8})"))),
            "body/media_kwargs/min_pixels");
  EXPECT_EQ(loc(refusal(body(R"("media_kwargs":{"num_frames":6})"))),
            "body/media_kwargs/num_frames");
  EXPECT_EQ(loc(refusal(body(R"("media_kwargs":{"num_frames":6,"fps":2})"))),
            "body/media_kwargs/num_frames");
  EXPECT_EQ(loc(refusal(body(R"("media_kwargs":{"num_frames":1,"fps":null})"))),
            "body/media_kwargs/num_frames");
  EXPECT_EQ(loc(refusal(body(R"("media_kwargs":{"do_resize":false})"))),
            "body/media_kwargs/do_resize");
  EXPECT_EQ(loc(refusal(body(R"("media_kwargs":[])"))), "body/media_kwargs");
}

// docs/spec/encoding.md §1: 1e400 is infinity in Python and would render "Infinity": refused with
// 422 naming the field, for every place a value is rendered; a field that must be a string or a
// literal gets its usual type refusal; an ignored key stays ignored (the reference never renders
// it).
TEST(Validate, NumbersThatOverflowADoubleAreRefusedWhereRendered) {
  auto body = [](const std::string& state, const std::string& questions) {
    return R"({"model":"m","state":)" + state + R"(,"questions":)" + questions + "}";
  };
  const std::string noul = R"({"q":{"type":"noul"}})";
  struct Case {
    std::string text, loc, path;
  };
  const Case cases[] = {
      {body("1e400", noul), "body/state", "state"},
      {body("-1e400", noul), "body/state", "state"},
      {body(R"({"a":[0,1e400]})", noul), "body/state", R"(state["a"][1])"},
      {body(R"("s")", R"({"q":{"type":"noul","instructions":{"w":-1E999}}})"),
       "body/questions/q/instructions", R"(q: instructions["w"])"},
      {body(R"("s")", R"({"q":{"type":"choice","criteria":{"b":"ok","a":[1e400]}}})"),
       "body/questions/q/criteria", R"(q: criteria["a"][0])"},
      {body(R"("s")", R"({"q":{"type":"score","criteria":["low",2e308]}})"),
       "body/questions/q/criteria", "q: criteria[1]"},
      {body(R"("s")", R"({"q":{"type":"noul","criteria":{"false":1e400}}})"),
       "body/questions/q/criteria", R"(q: criteria["false"])"},
  };
  for (const Case& c : cases) {
    RequestError e = refusal(c.text);
    EXPECT_EQ(e.status, 422) << c.text;
    EXPECT_EQ(loc(e), c.loc) << c.text;
    EXPECT_EQ(e.error.type, "value_error") << c.text;
    EXPECT_EQ(e.error.msg.rfind(c.path + " is a number too large for a double", 0), 0u)
        << e.error.msg;
  }
  // Fields with a type of their own keep their own refusal.
  EXPECT_EQ(loc(refusal(R"({"model":1e400,"state":"s","questions":{"q":{"type":"noul"}}})")),
            "body/model");
  EXPECT_EQ(loc(refusal(R"({"model":"m","state":"s","truncation":1e400,)" + kQ + "}")),
            "body/truncation");
  // The reference's earlier checks come first: a missing question before an infinite state.
  EXPECT_EQ(loc(refusal(R"({"model":"m","state":1e400})")), "body/questions");
  // Where nothing is rendered, nothing is refused: an unknown key, a noul criteria key other than
  // true/false, a finite neighbour (1e308) and an underflow (1e-400 is 0.0 in Python).
  ok(R"({"model":"m","state":[1e308,1e-400],"temperature":1e400,)" + kQ + "}");
  ok(body(R"("s")", R"({"q":{"type":"noul","criteria":{"maybe":1e400}}})"));
}

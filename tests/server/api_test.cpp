// POST /v1/systemone and the GET endpoints over real HTTP on loopback, against a `clefserve serve`
// child process: answers byte-equal to `clefserve decide`, every error class (status + body shape),
// truncation, request ids, /health, /v1/models.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 with -fsanitize=address reports false -Wmaybe-uninitialized inside std::regex's
// std::function members; the sanitizer build is -Werror too.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "shared_server.h"

namespace clef::server_test {
namespace {

using json = nlohmann::ordered_json;

int port() {
  return shared_port();
}

// {"detail": "<non-empty string>"} and the common headers.
void expect_detail_string(const HttpResponse& r, int status) {
  EXPECT_EQ(r.status, status) << r.body;
  EXPECT_EQ(r.header("content-type"), "application/json") << r.body;
  EXPECT_FALSE(r.header("x-request-id").empty());
  json j = r.json();
  ASSERT_TRUE(j.is_object()) << r.body;
  ASSERT_EQ(j.size(), 1u) << r.body;
  ASSERT_TRUE(j["detail"].is_string()) << r.body;
  EXPECT_FALSE(j["detail"].get<std::string>().empty());
}

// FastAPI's 422 shape; returns the single error item.
json expect_validation_error(const HttpResponse& r) {
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_EQ(r.header("content-type"), "application/json");
  json j = r.json();
  EXPECT_TRUE(j.is_object() && j.size() == 1 && j["detail"].is_array() && j["detail"].size() == 1)
      << r.body;
  if (!j.is_object() || !j["detail"].is_array() || j["detail"].empty()) return json::object();
  json item = j["detail"][0];
  EXPECT_TRUE(item["loc"].is_array() && !item["loc"].empty()) << r.body;
  if (item["loc"].is_array() && !item["loc"].empty()) {
    EXPECT_EQ(item["loc"][0], "body") << r.body;
  }
  EXPECT_TRUE(item["msg"].is_string() && !item["msg"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(item["type"].is_string() && !item["type"].get<std::string>().empty()) << r.body;
  EXPECT_EQ(item.size(), 3u) << r.body;
  return item;
}

const char* kSmallRequest =
    R"({"model":"clef-flash","state":"The invoice was charged twice.","questions":{)"
    R"("topic":{"type":"choice","criteria":{"billing":"Billing","outage":"Outages"}},)"
    R"("urgent":{"type":"noul"},"level":{"type":"score","criteria":["low","mid","high"]}}})";

TEST(ServerApi, AnswersAreByteEqualToDecide) {
  const auto requests = golden_requests("tiny-r2");
  const auto& expected = golden_decisions();
  ASSERT_EQ(requests.size(), expected.size());
  int answered = 0, refused = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("golden request " + std::to_string(i));
    HttpResponse r = post_json(port(), requests[i]);
    if (expected[i].status == 0) {
      EXPECT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(r.body, expected[i].output);
      EXPECT_EQ(r.header("content-type"), "application/json");
      EXPECT_TRUE(r.header("x-clef-state-truncated").empty());
      ++answered;
    } else {
      // decide refused it (state longer than --max-length 1024): the server must refuse too.
      ASSERT_EQ(expected[i].status, 2) << expected[i].output;
      json item = expect_validation_error(r);
      EXPECT_EQ(item["type"], "state_too_long") << r.body;
      ++refused;
    }
  }
  EXPECT_GT(answered, 10);
}

TEST(ServerApi, SmallRequestMatchesDecide) {
  DecideResult d = decide(kSmallRequest);
  ASSERT_EQ(d.status, 0) << d.output;
  HttpResponse r = post_json(port(), kSmallRequest);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, d.output);
  json j = r.json();
  EXPECT_EQ(j["model"], "clef-flash");
  EXPECT_EQ(j["usage"]["output_tokens"], 0);
  EXPECT_FALSE(j["usage"].contains("truncated_state_tokens"));
}

// A state that cannot fit 1024 tokens: refused by default (422 state_too_long), cut with "allow".
TEST(ServerApi, OverLongStateRefusedUnlessAllowed) {
  std::string state;
  for (int i = 0; i < 600; ++i) state += "the billing card was charged twice this morning ";
  json req = json::parse(kSmallRequest);
  req["state"] = state;
  HttpResponse refused = post_json(port(), req.dump());
  json item = expect_validation_error(refused);
  EXPECT_EQ(item["type"], "state_too_long");
  EXPECT_EQ(item["loc"], json::parse(R"(["body","state"])")) << refused.body;

  req["truncation"] = "allow";
  HttpResponse allowed = post_json(port(), req.dump());
  ASSERT_EQ(allowed.status, 200) << allowed.body;
  json j = allowed.json();
  ASSERT_TRUE(j["usage"].contains("truncated_state_tokens")) << allowed.body;
  int64_t cut = j["usage"]["truncated_state_tokens"];
  EXPECT_GT(cut, 0);
  EXPECT_EQ(allowed.header("x-clef-state-truncated"), std::to_string(cut));
  EXPECT_EQ(j["usage"]["input_tokens"], kSharedMaxLength);
  DecideResult d = decide(req.dump());
  ASSERT_EQ(d.status, 0) << d.output;
  EXPECT_EQ(allowed.body, d.output);

  // The server-wide default applies when the request does not say: an explicit "error" refuses.
  req["truncation"] = "error";
  EXPECT_EQ(post_json(port(), req.dump()).status, 422);
}

TEST(ServerApi, MalformedJsonAndNonObjectAre400) {
  expect_detail_string(post_json(port(), "{\"model\": "), 400);
  expect_detail_string(post_json(port(), ""), 400);
  expect_detail_string(post_json(port(), "[1, 2]"), 400);
  expect_detail_string(post_json(port(), "\"text\""), 400);
  expect_detail_string(post_json(port(), "{\"a\": NaN}"), 400);
}

TEST(ServerApi, ValidationErrorsAre422WithFieldPath) {
  json base = json::parse(kSmallRequest);
  {
    json req = base;
    req.erase("questions");
    json item = expect_validation_error(post_json(port(), req.dump()));
    EXPECT_NE(item["loc"].dump().find("questions"), std::string::npos) << item.dump();
  }
  {
    json req = base;
    req["questions"]["topic"]["type"] = "essay";
    json item = expect_validation_error(post_json(port(), req.dump()));
    EXPECT_NE(item["loc"].dump().find("topic"), std::string::npos) << item.dump();
  }
  {
    json req = base;
    req["questions"] = json::object();
    expect_validation_error(post_json(port(), req.dump()));
  }
  {
    json req = base;
    req["thinking"] = {{"enabled", true}};
    json item = expect_validation_error(post_json(port(), req.dump()));
    EXPECT_NE(item["loc"].dump().find("thinking"), std::string::npos) << item.dump();
  }
  {
    json req = base;
    // tiny-r2 has a tower (the CPU engine serves media) but its config's vision token ids are the
    // real model's, outside the tiny tokenizer: media are refused, never silently dropped.
    req["images"] = json::array({"data:image/png;base64,AAAA"});
    json item = expect_validation_error(post_json(port(), req.dump()));
    EXPECT_EQ(item["loc"], json::array({"body", "images"})) << item.dump();
    EXPECT_EQ(item["type"], "not_supported") << item.dump();
    EXPECT_NE(item["msg"].get<std::string>().find("takes no images or videos"), std::string::npos)
        << item.dump();
    req.erase("images");
    req["videos"] = json::array({{{"frames", json::array({"AAAA", "AAAA"})}}});
    item = expect_validation_error(post_json(port(), req.dump()));
    EXPECT_EQ(item["loc"], json::array({"body", "videos"})) << item.dump();
  }
  {
    json req = base;
    req["truncation"] = "sometimes";
    expect_validation_error(post_json(port(), req.dump()));
  }
  {
    json req = base;
    req["model"] = 7;
    expect_validation_error(post_json(port(), req.dump()));
  }
  // Accepted no-ops: thinking disabled, empty image list, unknown keys.
  json req = base;
  req["thinking"] = {{"enabled", false}};
  req["images"] = json::array();
  req["videos"] = nullptr;
  req["extra"] = 1;
  HttpResponse ok = post_json(port(), req.dump());
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.body, decide(kSmallRequest).output);
}

// A number beyond a double is Python's inf (the reference parses it), refused by validation where
// it would be rendered: 422 naming the field, not a 400 parse error. An images value that is not a
// list (or absent / null / []) is 422 naming the field.
TEST(ServerApi, OverflowingNumbersAndMediaAre422NamingTheField) {
  for (const char* state : {"1e400", "-1e400"}) {
    json item =
        expect_validation_error(post_json(port(), std::string(R"({"model":"m","state":)") + state +
                                                      R"(,"questions":{"q":{"type":"noul"}}})"));
    EXPECT_EQ(item["loc"], json::array({"body", "state"})) << item.dump();
    EXPECT_EQ(item["type"], "value_error") << item.dump();
  }
  for (const char* images : {R"("")", "0", "false", "{}"}) {
    json item = expect_validation_error(
        post_json(port(), std::string(R"({"model":"m","state":"x","images":)") + images +
                              R"(,"questions":{"q":{"type":"noul"}}})"));
    EXPECT_EQ(item["loc"], json::array({"body", "images"})) << images << " " << item.dump();
    EXPECT_EQ(item["type"], "list_type") << item.dump();
  }
  EXPECT_EQ(post_json(port(), R"({"model":"m","state":"x","images":[],)"
                              R"("questions":{"q":{"type":"noul"}}})")
                .status,
            200);
}

TEST(ServerApi, ContentTypeMustBeJson) {
  expect_detail_string(
      http(port(), "POST", "/v1/systemone", kSmallRequest, {{"Content-Type", "text/plain"}}), 415);
  expect_detail_string(http(port(), "POST", "/v1/systemone", kSmallRequest), 415);
  expect_detail_string(http(port(), "POST", "/v1/systemone", kSmallRequest,
                            {{"Content-Type", "application/x-www-form-urlencoded"}}),
                       415);
  for (const char* ok :
       {"application/json; charset=utf-8", "Application/JSON", "application/vnd.clef+json"}) {
    EXPECT_EQ(http(port(), "POST", "/v1/systemone", kSmallRequest, {{"Content-Type", ok}}).status,
              200)
        << ok;
  }
}

// The default --max-body-bytes is 32 MiB: room for base64 images and video frames.
TEST(ServerApi, BodyOverThirtyTwoMiBIs413) {
  std::string body = "{\"model\":\"m\",\"state\":\"" + std::string(32u << 20, 'a') + "\"}";
  expect_detail_string(post_json(port(), body), 413);
  // Just under the limit is read and handled (refused here for a missing field, not for size).
  std::string under = "{\"model\":\"m\",\"state\":\"" + std::string((32u << 20) - 64, 'a') + "\"}";
  EXPECT_EQ(post_json(port(), under).status, 422);
}

TEST(ServerApi, UnknownPathIs404AndWrongMethodIs405) {
  expect_detail_string(http(port(), "GET", "/v1/nothing"), 404);
  expect_detail_string(
      http(port(), "POST", "/v2/systemone", kSmallRequest, {{"Content-Type", "application/json"}}),
      404);
  HttpResponse r = http(port(), "GET", "/v1/systemone");
  expect_detail_string(r, 405);
  EXPECT_EQ(r.header("allow"), "POST");
  expect_detail_string(
      http(port(), "PUT", "/v1/systemone", kSmallRequest, {{"Content-Type", "application/json"}}),
      405);
  expect_detail_string(http(port(), "DELETE", "/v1/systemone"), 405);
  HttpResponse h = http(port(), "POST", "/health", "{}", {{"Content-Type", "application/json"}});
  expect_detail_string(h, 405);
  EXPECT_EQ(h.header("allow"), "GET, HEAD");
  expect_detail_string(http(port(), "POST", "/metrics", "x"), 405);
}

TEST(ServerApi, RequestIdIsEchoedOrFresh) {
  HttpResponse echoed = post_json(port(), kSmallRequest, {{"X-Request-Id", "client-id-42"}});
  EXPECT_EQ(echoed.status, 200);
  EXPECT_EQ(echoed.header("x-request-id"), "client-id-42");
  HttpResponse a = post_json(port(), kSmallRequest);
  HttpResponse b = post_json(port(), kSmallRequest);
  std::regex hex32("[0-9a-f]{32}");
  EXPECT_TRUE(std::regex_match(a.header("x-request-id"), hex32)) << a.header("x-request-id");
  EXPECT_NE(a.header("x-request-id"), b.header("x-request-id"));
  // Errors carry it too; an unusable client id (too long) is replaced, not echoed.
  HttpResponse err = http(port(), "GET", "/nope", "", {{"X-Request-Id", "err-7"}});
  EXPECT_EQ(err.header("x-request-id"), "err-7");
  HttpResponse longid = post_json(port(), kSmallRequest, {{"X-Request-Id", std::string(300, 'x')}});
  EXPECT_TRUE(std::regex_match(longid.header("x-request-id"), hex32));
  // The access log names the request id.
  EXPECT_NE(shared_server().log().find("id=client-id-42"), std::string::npos);
}

TEST(ServerApi, HealthReportsTheEngineAndRelease) {
  HttpResponse r = http(port(), "GET", "/health");
  ASSERT_EQ(r.status, 200) << r.body;
  json h = r.json();
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(h["model"], "tiny-r2");
  EXPECT_EQ(h["backend"], "cpu");
  EXPECT_TRUE(h["device"].is_string() && !h["device"].get<std::string>().empty());
  EXPECT_TRUE(h["dtype"].is_string() && !h["dtype"].get<std::string>().empty());
  EXPECT_EQ(h["quantization"], "none");  // a bf16 release
  EXPECT_TRUE(h["kernels"].is_object());
  EXPECT_TRUE(h["model_revision"].is_string());
  EXPECT_EQ(h["weights_sha256_verified"], false);
  EXPECT_EQ(h["max_length"], kSharedMaxLength);
  EXPECT_TRUE(h["version"].is_string() && !h["version"].get<std::string>().empty());
  EXPECT_EQ(h["demo"], false);
}

TEST(ServerApi, ModelsListsTheFolderName) {
  HttpResponse r = http(port(), "GET", "/v1/models");
  ASSERT_EQ(r.status, 200) << r.body;
  json m = r.json();
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "tiny-r2");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_TRUE(m["data"][0]["created"].is_number_integer());
  EXPECT_TRUE(m["data"][0]["owned_by"].is_string());
  // Without --served-model-name any model name is accepted (aliases such as @cf/...).
  json req = json::parse(kSmallRequest);
  req["model"] = "@cf/cloudflare/clef-flash";
  HttpResponse ok = post_json(port(), req.dump());
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.json()["model"], "@cf/cloudflare/clef-flash");
}

}  // namespace
}  // namespace clef::server_test

// /openapi.json checked as an OpenAPI 3.1 document by a real JSON parser (structure + every $ref
// resolves), /metrics parsed line by line per the Prometheus text exposition format 0.0.4.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 with -fsanitize=address reports false -Wmaybe-uninitialized inside std::regex's
// std::function members; the sanitizer build is -Werror too.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "shared_server.h"

namespace clef::server_test {
namespace {

using json = nlohmann::ordered_json;

int port() {
  return shared_port();
}

void collect_refs(const json& j, std::vector<std::string>* refs) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "$ref" && it.value().is_string()) refs->push_back(it.value());
      collect_refs(it.value(), refs);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) collect_refs(v, refs);
  }
}

TEST(ServerOpenApi, IsAValidOpenApi31Document) {
  HttpResponse r = http(port(), "GET", "/openapi.json");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), "application/json");
  json doc = json::parse(r.body);  // throws (fails the test) on invalid JSON
  ASSERT_TRUE(doc.is_object());
  ASSERT_TRUE(doc["openapi"].is_string());
  EXPECT_TRUE(std::regex_match(doc["openapi"].get<std::string>(), std::regex(R"(3\.1\.\d+)")));
  ASSERT_TRUE(doc["info"].is_object());
  EXPECT_TRUE(doc["info"]["title"].is_string());
  EXPECT_TRUE(doc["info"]["version"].is_string());
  ASSERT_TRUE(doc["paths"].is_object());

  const std::map<std::string, std::string> endpoints{
      {"/v1/systemone", "post"}, {"/health", "get"},  {"/health/live", "get"},
      {"/v1/models", "get"},     {"/metrics", "get"}, {"/openapi.json", "get"}};
  const std::set<std::string> methods{"get",     "put",  "post",  "delete",
                                      "options", "head", "patch", "trace"};
  for (const auto& [path, method] : endpoints) {
    ASSERT_TRUE(doc["paths"].contains(path)) << path;
    ASSERT_TRUE(doc["paths"][path].contains(method)) << path;
  }
  for (auto& [path, item] : doc["paths"].items()) {
    EXPECT_EQ(path.front(), '/');
    for (auto& [m, op] : item.items()) {
      if (!methods.count(m)) continue;
      ASSERT_TRUE(op["responses"].is_object() && !op["responses"].empty()) << path << " " << m;
      for (auto& [code, resp] : op["responses"].items()) {
        EXPECT_TRUE(std::regex_match(code, std::regex(R"([1-5](\d\d|XX)|default)"))) << code;
        EXPECT_TRUE(resp.contains("$ref") || resp["description"].is_string()) << path << code;
      }
    }
  }
  // The request schema and the 422 error schema are described.
  const json& post = doc["paths"]["/v1/systemone"]["post"];
  EXPECT_TRUE(post["requestBody"]["content"].contains("application/json"));
  for (const char* code : {"200", "400", "401", "404", "405", "408", "411", "413", "415", "422",
                           "429", "431", "500", "501", "503"}) {
    if (std::string(code) == "405") continue;  // answered for other methods, not this operation
    EXPECT_TRUE(post["responses"].contains(code)) << code;
  }
  // 499 (the client closed the connection) is never sent: log and metrics only.
  EXPECT_FALSE(post["responses"].contains("499"));
  // The transport's refusals apply to every route; only /health and /health/live need no key.
  for (const char* path : {"/health", "/health/live", "/v1/models", "/metrics", "/openapi.json"}) {
    const json& responses = doc["paths"][path]["get"]["responses"];
    for (const char* code : {"400", "408", "431", "503"})
      EXPECT_TRUE(responses.contains(code)) << path << " " << code;
    EXPECT_EQ(responses.contains("401"), std::string(path).rfind("/health", 0) != 0) << path;
  }

  // Every $ref is a local JSON pointer that resolves inside the document.
  std::vector<std::string> refs;
  collect_refs(doc, &refs);
  EXPECT_GT(refs.size(), 10u);
  for (const auto& ref : refs) {
    ASSERT_EQ(ref.rfind("#/", 0), 0u) << ref;
    json::json_pointer ptr(ref.substr(1));
    EXPECT_TRUE(doc.contains(ptr)) << "unresolved $ref " << ref;
  }
}

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value;
};

double parse_value(const std::string& s) {
  if (s == "+Inf") return INFINITY;
  if (s == "-Inf") return -INFINITY;
  if (s == "NaN") return NAN;
  size_t used = 0;
  double v = std::stod(s, &used);
  EXPECT_EQ(used, s.size()) << s;
  return v;
}

// Strict line-by-line parse of the text format; fails the test on any malformed line.
std::vector<Sample> parse_prometheus(const std::string& text,
                                     std::map<std::string, std::string>* types) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*)");
  static const std::regex type(
      R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  static const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*)\})? ([^ ]+)( -?\d+)?)");
  static const std::regex label(R"(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)\")");
  std::vector<Sample> out;
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "the exposition must end with a line feed";
  std::istringstream in(text);
  std::string line;
  std::set<std::string> typed_families;
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (std::regex_match(line, m, type)) {
        EXPECT_TRUE(typed_families.insert(m[1]).second) << "TYPE repeated: " << line;
        (*types)[m[1]] = m[2];
      } else {
        EXPECT_TRUE(std::regex_match(line, m, help)) << "bad comment line: " << line;
      }
      continue;
    }
    if (!std::regex_match(line, m, sample)) {
      ADD_FAILURE() << "bad sample line: " << line;
      continue;
    }
    Sample s{m[1], {}, parse_value(m[4])};
    std::string labels = m[3];
    for (std::sregex_iterator it(labels.begin(), labels.end(), label), end; it != end; ++it)
      s.labels[(*it)[1]] = (*it)[2];
    // The family must have been declared before its samples.
    std::string family = s.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string sfx = suffix;
      if (!types->count(family) && family.size() > sfx.size() &&
          family.compare(family.size() - sfx.size(), sfx.size(), sfx) == 0)
        family = family.substr(0, family.size() - sfx.size());
    }
    EXPECT_TRUE(types->count(family)) << "sample before its TYPE line: " << line;
    out.push_back(std::move(s));
  }
  return out;
}

TEST(ServerMetrics, PrometheusTextFormat) {
  // Some traffic first: an answer, a 422, a 404.
  const char* req = R"({"model":"m","state":"s","questions":{"q":{"type":"noul"}}})";
  ASSERT_EQ(post_json(port(), req).status, 200);
  ASSERT_EQ(post_json(port(), "{}").status, 422);
  ASSERT_EQ(http(port(), "GET", "/missing").status, 404);

  HttpResponse r = http(port(), "GET", "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type").rfind("text/plain", 0), 0u) << r.header("content-type");
  std::map<std::string, std::string> types;
  std::vector<Sample> samples = parse_prometheus(r.body, &types);
  ASSERT_FALSE(samples.empty());

  auto find = [&](const std::string& name, const std::map<std::string, std::string>& labels) {
    for (const auto& s : samples)
      if (s.name == name && s.labels == labels) return s.value;
    ADD_FAILURE() << "missing sample " << name;
    return std::nan("");
  };
  EXPECT_EQ(types["clef_http_requests_total"], "counter");
  EXPECT_GE(find("clef_http_requests_total", {{"path", "/v1/systemone"}, {"status", "200"}}), 1);
  EXPECT_GE(find("clef_http_requests_total", {{"path", "/v1/systemone"}, {"status", "422"}}), 1);
  EXPECT_GE(find("clef_http_requests_total", {{"path", "other"}, {"status", "404"}}), 1);
  EXPECT_EQ(types["clef_request_duration_seconds"], "histogram");
  EXPECT_GE(find("clef_request_duration_seconds_count", {}), 2);
  EXPECT_GE(find("clef_input_tokens_total", {}), 1);
  EXPECT_EQ(types["clef_queue_depth"], "gauge");
  EXPECT_EQ(find("clef_queue_depth", {}), 0);
  EXPECT_EQ(find("clef_queue_capacity", {}), 256);
  EXPECT_GE(find("clef_in_flight_requests", {}), 1);  // this request
  EXPECT_GE(find("clef_batch_size_requests_count", {{"device", "cpu"}}), 1);
  EXPECT_GE(find("clef_batches_total", {{"device", "cpu"}}), 1);
  EXPECT_EQ(types["clef_requests_dropped_total"], "counter");
  EXPECT_GE(find("clef_requests_dropped_total", {}), 0);
  EXPECT_EQ(find("clef_gpu_memory_used_bytes", {{"device", "cpu"}}), 0);  // CPU backend

  // Histogram invariants: buckets cumulative and ending at +Inf == _count, per series (the
  // per-engine histograms carry a device label).
  for (const auto& [family, type] : types) {
    if (type != "histogram") continue;
    std::map<std::map<std::string, std::string>, std::pair<double, double>> prev_inf;
    for (const auto& s : samples) {
      if (s.name != family + "_bucket") continue;
      ASSERT_TRUE(s.labels.count("le")) << family;
      auto series = s.labels;
      series.erase("le");
      auto& [prev, inf] = prev_inf.try_emplace(series, 0.0, -1.0).first->second;
      EXPECT_GE(s.value, prev) << family << " le=" << s.labels.at("le");
      prev = s.value;
      if (s.labels.at("le") == "+Inf") inf = s.value;
    }
    EXPECT_FALSE(prev_inf.empty()) << family;
    for (const auto& [series, pi] : prev_inf)
      EXPECT_EQ(pi.second, find(family + "_count", series)) << family;
  }
}

}  // namespace
}  // namespace clef::server_test

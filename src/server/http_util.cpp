#include "server/http_util.h"

#include <algorithm>
#include <cctype>

#include "server/playground.h"

namespace clef::server::detail {

Route route_of(std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
  if (path == "/v1/systemone") return Route::SystemOne;
  if (path == "/health") return Route::Health;
  if (path == "/health/live") return Route::Live;
  if (path == "/v1/models") return Route::Models;
  if (path == "/metrics") return Route::Metrics;
  if (path == "/openapi.json") return Route::OpenApi;
  if (path == "/") return Route::Ui;
  if (is_ui_path(path)) return Route::UiAsset;
  return Route::Unknown;
}

const char* route_label(Route r) {
  switch (r) {
    case Route::SystemOne:
      return "/v1/systemone";
    case Route::Health:
      return "/health";
    case Route::Live:
      return "/health/live";
    case Route::Models:
      return "/v1/models";
    case Route::Metrics:
      return "/metrics";
    case Route::OpenApi:
      return "/openapi.json";
    case Route::Ui:
      return "/";
    case Route::UiAsset:
      return "/ui/*";
    case Route::Unknown:
      break;
  }
  return "other";
}

const char* route_allow(Route r) {
  return r == Route::SystemOne ? "POST" : "GET, HEAD";
}

std::string dump(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

bool is_json_content_type(const std::string& value) {
  std::string media = value.substr(0, value.find(';'));
  while (!media.empty() && std::isspace(static_cast<unsigned char>(media.back()))) media.pop_back();
  size_t b = 0;
  while (b < media.size() && std::isspace(static_cast<unsigned char>(media[b]))) ++b;
  media = media.substr(b);
  for (auto& c : media) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (media == "application/json") return true;
  const std::string prefix = "application/", suffix = "+json";
  return media.size() > prefix.size() + suffix.size() && media.starts_with(prefix) &&
         media.ends_with(suffix);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  size_t n = std::max(a.size(), b.size());
  size_t diff = a.size() ^ b.size();
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<size_t>(x ^ y);
  }
  return diff == 0;
}

Reply json_reply(int status, std::string body) {
  Reply r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Reply detail_reply(int status, const std::string& detail) {
  return json_reply(status, dump(ojson{{"detail", detail}}));
}

Reply validation_reply(const encoding::FieldError& e) {
  ojson loc = ojson::array();
  for (const auto& part : e.loc) loc.push_back(part);
  ojson item{{"loc", loc}, {"msg", e.msg}, {"type", e.type}};
  return json_reply(422, dump(ojson{{"detail", ojson::array({item})}}));
}

std::string trim_lower(std::string_view v) {
  size_t b = 0, e = v.size();
  while (b < e && std::isspace(static_cast<unsigned char>(v[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(v[e - 1]))) --e;
  std::string out(v.substr(b, e - b));
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_standard_method(http::verb v) {
  switch (v) {
    case http::verb::get:
    case http::verb::head:
    case http::verb::post:
    case http::verb::put:
    case http::verb::delete_:
    case http::verb::connect:
    case http::verb::options:
    case http::verb::trace:
    case http::verb::patch:
      return true;
    default:
      return false;
  }
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace clef::server::detail

// HTTP helpers of the server: routes and their labels, replies (JSON bodies, FastAPI-style
// `detail`), content types, methods, the constant-time key compare. No socket I/O here.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "encoding/request.h"
#include "server/net.h"

namespace clef::server::detail {

// Ui: the playground page `/`; UiAsset: its script, style sheet and icon under /ui/ (playground.h).
enum class Route { SystemOne, Health, Live, Models, Metrics, OpenApi, Ui, UiAsset, Unknown };

Route route_of(std::string_view target);
const char* route_label(Route r);
// The methods a route answers (the Allow header of its 405).
const char* route_allow(Route r);

// One answer before it becomes an HTTP response. Headers X-Request-Id, Content-Type,
// Content-Length, Connection, CORS and Server-Timing are added when it is written.
struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // Connection: close after it
};

std::string dump(const ojson& j);
// `application/json` or `application/<x>+json`, any parameters (FastAPI's rule).
bool is_json_content_type(const std::string& value);
// Compares without an early exit so the key cannot be guessed byte by byte from timings.
bool constant_time_equal(std::string_view a, std::string_view b);
Reply json_reply(int status, std::string body);
Reply detail_reply(int status, const std::string& detail);
Reply validation_reply(const encoding::FieldError& e);
std::string trim_lower(std::string_view v);
// RFC 9110 methods: known, so a route answers them with 405 when it does not serve them. Any other
// method (BREW, PROPFIND, ...) is not implemented by this server at all: 501.
bool is_standard_method(http::verb v);
Clock::duration seconds(double s);

}  // namespace clef::server::detail

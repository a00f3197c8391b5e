// Per-request bookkeeping for the access log, metrics and the Server-Timing header.
#pragma once

#include <cstdint>
#include <string>

#include "server/http_util.h"

namespace clef::server::detail {

// What the access log, metrics and Server-Timing need about one request; reset per request.
struct RequestContext {
  bool counted = false;  // in in_flight (from its header on, or from its error answer on)
  Clock::time_point start;
  // Server-Timing phases of a /v1/systemone request (ms; < 0 = not reached).
  double read_ms = -1, encode_ms = -1, queue_ms = -1, forward_ms = -1, answer_ms = -1;
  std::string id;
  std::string method;
  std::string origin;  // the request's Origin header (CORS)
  Route route = Route::Unknown;
  bool head = false;
  bool keep_alive = true;
  int64_t input_tokens = -1;
  int64_t truncated_state_tokens = 0;
};

double ms_between(Clock::time_point a, Clock::time_point b);
// W3C Server-Timing: "name;dur=ms" entries, comma-separated; phases not reached are left out.
std::string server_timing(const RequestContext& c, double total_ms);

}  // namespace clef::server::detail

#include "server/request_context.h"

#include <cstdio>

namespace clef::server::detail {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string server_timing(const RequestContext& c, double total_ms) {
  std::string out;
  char buf[64];
  auto add = [&](const char* name, double ms) {
    if (ms < 0) return;
    std::snprintf(buf, sizeof buf, "%s%s;dur=%.3f", out.empty() ? "" : ", ", name, ms);
    out += buf;
  };
  add("read", c.read_ms);
  add("encode", c.encode_ms);
  add("queue", c.queue_ms);
  add("forward", c.forward_ms);
  add("answer", c.answer_ms);
  add("total", total_ms);
  return out;
}

}  // namespace clef::server::detail

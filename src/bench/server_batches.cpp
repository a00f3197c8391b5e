#include "bench/server_batches.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace clef::bench {

using Json = nlohmann::ordered_json;

namespace {

// The value of label `name` in a `{a="x",b="y"}` block, or "" (values hold no quotes here).
std::string label_value(const std::string& labels, const std::string& name) {
  const std::string key = name + "=\"";
  size_t at = 0;
  while ((at = labels.find(key, at)) != std::string::npos) {
    if (at == 0 || labels[at - 1] == '{' || labels[at - 1] == ',') {
      const size_t b = at + key.size(), e = labels.find('"', b);
      return e == std::string::npos ? std::string() : labels.substr(b, e - b);
    }
    at += key.size();
  }
  return {};
}

bool parse_number(const std::string& s, double* out) {
  if (s == "+Inf") return *out = std::numeric_limits<double>::infinity(), true;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

}  // namespace

BatchCounters parse_batch_counters(const std::string& text) {
  BatchCounters c;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    double value = 0.0;
    if (!parse_number(line.substr(sp + 1), &value) || std::isinf(value)) continue;
    std::string series = line.substr(0, sp), labels;
    if (const size_t brace = series.find('{'); brace != std::string::npos) {
      labels = series.substr(brace);
      series.resize(brace);
    }
    if (series == "clef_batch_size_requests_count") {
      c.found = true;
      c.forwards += value;
    } else if (series == "clef_batch_size_requests_sum") {
      c.requests += value;
    } else if (series == "clef_batch_size_tokens_sum") {
      c.tokens += value;
    } else if (series == "clef_forward_duration_seconds_sum") {
      c.forward_seconds += value;
    } else if (series == "clef_batch_size_requests_bucket") {
      double le = 0.0;
      if (parse_number(label_value(labels, "le"), &le)) c.requests_le[le] += value;
    }
  }
  return c;
}

Json batch_window_json(const BatchCounters& before, const BatchCounters& after) {
  Json j = Json::object();
  if (!before.found || !after.found) {
    j["error"] = "the server's /metrics had no clef_batch_size_requests histogram";
    return j;
  }
  if (after.forwards < before.forwards || after.requests < before.requests) {
    // Counters only grow: these went back, so the server restarted between the two readings.
    j["error"] = "the server's batch counters went back during the run (a restart?)";
    return j;
  }
  const double forwards = after.forwards - before.forwards;
  const double requests = after.requests - before.requests;
  const double tokens = after.tokens - before.tokens;
  j["forwards"] = forwards;
  j["requests"] = requests;
  j["tokens"] = tokens;
  j["mean_requests_per_forward"] = forwards > 0 ? Json(requests / forwards) : Json();
  j["mean_tokens_per_forward"] = forwards > 0 ? Json(tokens / forwards) : Json();
  j["forward_seconds"] = after.forward_seconds - before.forward_seconds;
  Json hist = Json::array();
  for (const auto& [le, n] : after.requests_le) {
    const auto b = before.requests_le.find(le);
    const double was = b == before.requests_le.end() ? 0.0 : b->second;
    hist.push_back({{"le", std::isinf(le) ? Json("+Inf") : Json(le)}, {"forwards", n - was}});
  }
  j["forwards_with_at_most"] = hist;
  j["note"] =
      "the server's own counters over the measured phase: requests from other clients in that "
      "window count too";
  return j;
}

}  // namespace clef::bench

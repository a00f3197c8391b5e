// What the server did with the measured requests: its batch counters (Prometheus text from
// /metrics, clefserve's clef_batch_size_* and clef_forward_duration_seconds histograms) read just
// before and just after the measured phase, so warm-up stays out. The counters are the server's
// own: any other client's requests in that window count too, and the report says so.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace clef::bench {

// One reading of the counters, summed over every label set but `le` (a server on several GPUs
// reports one histogram per device). found: the text had clef_batch_size_requests_count.
struct BatchCounters {
  bool found = false;
  double forwards = 0.0;  // clef_batch_size_requests_count
  double requests = 0.0;  // clef_batch_size_requests_sum
  double tokens = 0.0;    // clef_batch_size_tokens_sum
  double forward_seconds = 0.0;
  std::map<double, double> requests_le;  // cumulative forwards with at most `le` requests
};

// Never throws: lines it does not know, comments and garbage are skipped.
BatchCounters parse_batch_counters(const std::string& metrics_text);

// The measured window (after - before) as report JSON: forwards, requests, tokens, means a
// forward, the summed forward time and the cumulative histogram [{le, forwards}] ("+Inf" last).
// A reading that failed (either text empty or without the counters), or counters that went back
// (the server restarted in between), gives {"error": why}.
nlohmann::ordered_json batch_window_json(const BatchCounters& before, const BatchCounters& after);

}  // namespace clef::bench

// Server metrics in the Prometheus text exposition format (version 0.0.4): request counts by path
// and status, request latency histogram, tokens processed, batch sizes, queue depth, GPU memory.
// Thread-safe; counters are updated by HTTP threads and the engine worker.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace clef::server {

// A cumulative histogram with fixed upper bounds (the +Inf bucket is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends `<name>_bucket{le=...}`, `<name>_sum`, `<name>_count` lines.
  void render(std::string& out, const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

struct Gauges {
  size_t queue_depth = 0;
  size_t queue_capacity = 0;
  size_t in_flight = 0;
  int64_t gpu_memory_used_bytes = -1;  // -1: not a GPU backend (the metric is then 0)
};

class Metrics {
 public:
  Metrics();
  // path: the route ("/v1/systemone", ...) or "other" for unknown paths (bounded label set).
  void observe_request(const std::string& path, int status, double seconds);
  void add_tokens(size_t input_tokens, size_t truncated_state_tokens);
  void observe_batch(size_t requests, size_t tokens, double seconds);
  // Queued requests dropped before the engine because their client had gone.
  void add_dropped(size_t requests);
  std::string render(const Gauges& g) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  Histogram latency_;
  Histogram batch_requests_;
  Histogram batch_tokens_;
  Histogram forward_seconds_;
  uint64_t input_tokens_ = 0;
  uint64_t truncated_tokens_ = 0;
  uint64_t batches_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace clef::server

// Server metrics in the Prometheus text exposition format (version 0.0.4): request counts by path
// and status, request latency histogram, tokens processed, batch sizes, queue depth, GPU memory.
// The per-engine series (batches, batch sizes, forward time, GPU memory) carry a `device` label,
// one series per engine ("cpu", "cuda:0", ...); sum over it for the server's total. Thread-safe;
// counters are updated by HTTP threads and the engine workers.
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
  // Appends `<name>_bucket{le=...}`, `<name>_sum`, `<name>_count` lines; `labels` (e.g.
  // `device="cuda:0"`, already escaped) go before `le` on every line.
  void render(std::string& out, const std::string& name, const std::string& labels = "") const;

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
  // Per engine, in Metrics' device order; -1: not a GPU backend (the metric is then 0).
  std::vector<int64_t> gpu_memory_used_bytes;
};

class Metrics {
 public:
  // `devices`: the engines' device names in queue order (InferenceQueue's engine index).
  explicit Metrics(std::vector<std::string> devices = {"cpu"});
  // path: the route ("/v1/systemone", ...) or "other" for unknown paths (bounded label set).
  void observe_request(const std::string& path, int status, double seconds);
  void add_tokens(size_t input_tokens, size_t truncated_state_tokens);
  // One forward pass on engine `engine` (an index into `devices`).
  void observe_batch(size_t engine, size_t requests, size_t tokens, double seconds);
  // Queued requests dropped before the engine because their client had gone.
  void add_dropped(size_t requests);
  std::string render(const Gauges& g) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  struct PerEngine {
    std::string label;  // device="..."
    Histogram batch_requests, batch_tokens, forward_seconds;
    uint64_t batches = 0;
  };
  Histogram latency_;
  std::vector<PerEngine> engines_;
  uint64_t input_tokens_ = 0;
  uint64_t truncated_tokens_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace clef::server

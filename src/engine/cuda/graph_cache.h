// Captured backbone forwards, one CUDA graph per key, most recently used first. A graph holds the
// workspace's pointers, so the cache is cleared whenever the workspace moves.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <list>

#include "engine/cuda/data_type.h"

namespace clef::engine::cuda {

struct GraphKey {
  int tokens = 0;     // padded token bucket
  int sequences = 1;  // sequences packed into the forward
  DataType weights = DataType::BF16;
  bool operator==(const GraphKey&) const = default;
};

class GraphCache {
 public:
  explicit GraphCache(size_t limit) : limit_(limit) {}
  ~GraphCache() { clear(); }
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // The graph for `key`, marked most recently used; null when none was captured.
  cudaGraphExec_t find(const GraphKey& key);
  // Captures what `enqueue` puts on `s` (nothing may synchronise or time inside it), uploads the
  // graph so its first launch is as fast as the rest, and keeps it; evicts beyond the limit.
  cudaGraphExec_t capture(const GraphKey& key, cudaStream_t s,
                          const std::function<void()>& enqueue);
  void clear();
  void set_limit(size_t limit) { limit_ = limit; }
  size_t size() const { return graphs_.size(); }
  size_t captured() const { return captured_; }  // ever, for the cold-work counters

 private:
  std::list<std::pair<GraphKey, cudaGraphExec_t>> graphs_;
  size_t limit_;
  size_t captured_ = 0;
};

}  // namespace clef::engine::cuda

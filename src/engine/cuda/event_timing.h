// Device time of enqueued work, measured with a pair of CUDA events: one interval (elapsed_ms) or
// the median of repeated ones (median_ms). Used by the GEMM tuning, the backbone's FP8-or-bf16
// choice and the profiling diagnostics.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "engine/cuda/cuda_check.h"

namespace clef::engine::cuda {

// Two events, destroyed on every path.
class EventPair {
 public:
  EventPair() {
    CLEF_CUDA_CHECK(cudaEventCreate(&start));
    if (cudaEventCreate(&stop) != cudaSuccess) {
      cudaEventDestroy(start);
      throw std::runtime_error("cudaEventCreate failed");
    }
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  cudaEvent_t start, stop;
};

// Device time (ms) of what `enqueue` puts on stream s, between events recorded around it.
template <typename F>
float elapsed_ms(const EventPair& e, cudaStream_t s, F&& enqueue) {
  CLEF_CUDA_CHECK(cudaEventRecord(e.start, s));
  enqueue();
  CLEF_CUDA_CHECK(cudaEventRecord(e.stop, s));
  CLEF_CUDA_CHECK(cudaEventSynchronize(e.stop));
  float ms = 0;
  CLEF_CUDA_CHECK(cudaEventElapsedTime(&ms, e.start, e.stop));
  return ms;
}
template <typename F>
float elapsed_ms(cudaStream_t s, F&& enqueue) {
  const EventPair e;
  return elapsed_ms(e, s, enqueue);
}

// Median device time (ms) of `enqueue` on stream s over `runs` repetitions.
template <typename F>
double median_ms(cudaStream_t s, int runs, F&& enqueue) {
  const EventPair e;
  std::vector<float> t;
  for (int i = 0; i < std::max(runs, 1); ++i) t.push_back(elapsed_ms(e, s, enqueue));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace clef::engine::cuda

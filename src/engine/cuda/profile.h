// Device-time measurement for `clefserve profile` and the engine's diagnostics: events between the
// ops of one eager forward, and the median time of a repeated enqueue.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_engine.h"

namespace clef::engine::cuda {

// Events between the ops of one eager forward, each interval labelled with the op that ended it.
class StageRecorder {
 public:
  explicit StageRecorder(cudaStream_t s) : s_(s) {}
  ~StageRecorder();
  StageRecorder(const StageRecorder&) = delete;
  StageRecorder& operator=(const StageRecorder&) = delete;
  void mark(const char* label);
  StageTimes collect();  // synchronises the stream

 private:
  cudaStream_t s_;
  std::vector<std::pair<cudaEvent_t, std::string>> events_;
};

// Events around one enqueue each time; destroyed on every path.
class EventPair {
 public:
  EventPair();
  ~EventPair();
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  cudaEvent_t start, stop;
};

// Median device time (ms) of `enqueue` on stream s over `runs` repetitions, timed with events.
template <typename F>
double median_ms(cudaStream_t s, int runs, F&& enqueue) {
  EventPair e;
  std::vector<float> t;
  for (int i = 0; i < std::max(runs, 1); ++i) {
    CLEF_CUDA_CHECK(cudaEventRecord(e.start, s));
    enqueue();
    CLEF_CUDA_CHECK(cudaEventRecord(e.stop, s));
    CLEF_CUDA_CHECK(cudaEventSynchronize(e.stop));
    float ms = 0;
    CLEF_CUDA_CHECK(cudaEventElapsedTime(&ms, e.start, e.stop));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace clef::engine::cuda

// Device-time measurement for `clefserve profile` and the engine's diagnostics: events between the
// ops of one eager forward (the median time of a repeated enqueue: event_timing.h).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/event_timing.h"

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

}  // namespace clef::engine::cuda

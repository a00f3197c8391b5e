#include "engine/cuda/profile.h"

namespace clef::engine::cuda {

StageRecorder::~StageRecorder() {
  for (auto& e : events_) cudaEventDestroy(e.first);
}

void StageRecorder::mark(const char* label) {
  cudaEvent_t e;
  CLEF_CUDA_CHECK(cudaEventCreate(&e));
  events_.emplace_back(e, label);
  CLEF_CUDA_CHECK(cudaEventRecord(e, s_));
}

StageTimes StageRecorder::collect() {
  StageTimes st;
  CLEF_CUDA_CHECK(cudaStreamSynchronize(s_));
  for (size_t i = 1; i < events_.size(); ++i) {
    float ms = 0;
    CLEF_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i - 1].first, events_[i].first));
    st.ms[events_[i].second] += ms;
    st.total_ms += ms;
  }
  return st;
}

}  // namespace clef::engine::cuda

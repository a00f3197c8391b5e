#include "engine/cuda/gdn_overlap.h"

#include <algorithm>

#include "engine/cuda/cuda_check.h"

namespace clef::engine::cuda {

GdnOverlap::GdnOverlap(int groups) : groups_(std::clamp(groups, 1, kMaxGroups)) {
  if (groups_ <= 1) return;
  // The scan is the critical path: its stream gets the highest priority, the outputs (which only
  // fill idle SMs) the lowest.
  int least = 0, greatest = 0;
  CLEF_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CLEF_CUDA_CHECK(cudaStreamCreateWithPriority(&scan_stream, cudaStreamNonBlocking, greatest));
  CLEF_CUDA_CHECK(cudaStreamCreateWithPriority(&out_stream, cudaStreamNonBlocking, least));
  auto make = [](cudaEvent_t& e) {
    CLEF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  };
  make(fork);
  make(join);
  for (int i = 0; i < groups_; ++i) make(prep_done[i]), make(scan_done[i]);
}

GdnOverlap::~GdnOverlap() {
  for (cudaEvent_t e : prep_done)
    if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : scan_done)
    if (e) cudaEventDestroy(e);
  if (fork) cudaEventDestroy(fork);
  if (join) cudaEventDestroy(join);
  if (scan_stream) cudaStreamDestroy(scan_stream);
  if (out_stream) cudaStreamDestroy(out_stream);
}

int GdnOverlap::groups_for(int Hv) const {
  for (int g = std::min(groups_, Hv); g > 1; --g)
    if (Hv % g == 0) return g;
  return 1;
}

}  // namespace clef::engine::cuda

// Side streams that let the tensor-core GDN path (gdn_tc.h) overlap its kernels across groups of
// value heads: prep(group i) -> scan(group i) -> output(group i), with group i's outputs formed
// while later groups still scan. Owned by the engine (one per engine stream); the events are
// reused by every GDN layer, which is safe because each layer joins back into the caller's stream
// before the next one forks.
#pragma once

#include <cuda_runtime.h>

namespace clef::engine::cuda {

class GdnOverlap {
 public:
  static constexpr int kMaxGroups = 8;

  // groups: the number of head groups to aim for (1 = no overlap; clamped to kMaxGroups).
  explicit GdnOverlap(int groups);
  ~GdnOverlap();
  GdnOverlap(const GdnOverlap&) = delete;
  GdnOverlap& operator=(const GdnOverlap&) = delete;

  // The largest group count <= the configured one that divides Hv.
  int groups_for(int Hv) const;
  int groups() const { return groups_; }

  cudaStream_t scan_stream = nullptr, out_stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  cudaEvent_t prep_done[kMaxGroups] = {}, scan_done[kMaxGroups] = {};

 private:
  int groups_ = 1;
};

}  // namespace clef::engine::cuda

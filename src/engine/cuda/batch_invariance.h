// Batch invariance (issue 14): a request answered inside a packed batch gets the same bits as
// alone. Three choices of the CUDA backbone depend on it (docs/engine.md, "Batch invariance"):
//   * GEMMs: every M of a shape runs an algorithm of one class of equal bits (gemm/gemm.h);
//   * attention (bf16, head dim 256): a pack's K and V go into per-sequence key tiles (always, not
//     only under this switch: attention/kv_tiles.h), so wg64te/ote cut each sequence's keys into
//     the blocks they have alone;
//   * the GDN core: packs run the three kernels, as a lone request does (the fused core rounds
//     otherwise).
// On by default; CLEF_BATCH_INVARIANT=0 gives each of them back its fastest form, for the process.
// Plain C++: included by host code and .cu files alike.
#pragma once

#include <cstdlib>
#include <cstring>

namespace clef::engine::cuda {

inline bool batch_invariant() {
  static const bool on = [] {
    const char* v = std::getenv("CLEF_BATCH_INVARIANT");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

}  // namespace clef::engine::cuda

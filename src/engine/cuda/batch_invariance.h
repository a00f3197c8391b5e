// Batch invariance (issue 14): a request answered inside a packed batch gets the same bits as
// alone. Three choices of the CUDA backbone depend on it (docs/engine.md, "Batch invariance"):
//   * GEMMs: every M of a shape runs an algorithm of one class of equal bits (gemm/gemm.h);
//   * attention (bf16, head dim 256): packed forwards read K and V by rows from each sequence's
//     first key (wg64) instead of in key tiles that follow the global row (wg64te/ote, whose first
//     tile would hold a neighbour's keys and so cut the softmax's key blocks elsewhere than alone);
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

// Batch invariance (issue 14): a request answered inside a packed batch gets the same bits as
// alone. Three choices of the CUDA backbone depend on it (docs/engine.md, "Batch invariance"):
//   * GEMMs: every M of a shape runs an algorithm of one class of equal bits (gemm/gemm.h);
//   * attention (bf16, head dim 256): a pack reads K and V by rows from each sequence's first key
//     (wg64), or with kv_sequence_tiles() in per-sequence key tiles (attention/kv_tiles.h); either
//     way each sequence's keys are cut into the blocks they have alone (global key tiles would put
//     a neighbour's keys in a sequence's first tile);
//   * the GDN core: packs run the three kernels, as a lone request does (the fused core rounds
//     otherwise).
// On by default; CLEF_BATCH_INVARIANT=0 gives each of them back its fastest form, for the process.
// Plain C++: included by host code and .cu files alike.
#pragma once

#include <cstdlib>
#include <cstring>

namespace clef::engine::cuda {

// Per-sequence key tiles for packed forwards (attention/kv_tiles.h; CLEF_KV_SEQ_TILES=1 on, 0 off).
// Off by default until their speed is measured (session 33: their tests pass and a pack's hidden
// rows are bit for bit the same with them): a pack then reads K and V by rows (wg64) under batch
// invariance, or in global key tiles without it.
inline bool kv_sequence_tiles() {
  static const bool on = [] {
    const char* v = std::getenv("CLEF_KV_SEQ_TILES");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

inline bool batch_invariant() {
  static const bool on = [] {
    const char* v = std::getenv("CLEF_BATCH_INVARIANT");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

}  // namespace clef::engine::cuda

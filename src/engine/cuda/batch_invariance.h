// Batch invariance (issue 14): a request answered inside a packed batch gets the same bits as
// alone. Three choices of the CUDA backbone depend on it (docs/engine.md, "Batch invariance"):
//   * GEMMs: every M of a shape runs an algorithm of one class of equal bits (gemm/gemm.h);
//   * attention (bf16, head dim 256): a pack's K and V go into per-sequence key tiles
//     (kv_sequence_tiles(), attention/kv_tiles.h), or with CLEF_KV_SEQ_TILES=0 are read by rows
//     from each sequence's first key (wg64); either way each sequence's keys are cut into the
//     blocks they have alone (global key tiles would put a neighbour's keys in its first tile);
//   * the GDN core: packs run the three kernels, as a lone request does (the fused core rounds
//     otherwise).
// The SwiGLU-epilogue GEMM (gemm/swiglu_gemm.h) runs packs above its row threshold and cuBLASLt +
// swiglu below it; start-up checks the two agree bit for bit and, under invariance, drops the
// fused kernel if not.
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

// Per-sequence key tiles for packed forwards (attention/kv_tiles.h): on wherever batch invariance
// is (CLEF_KV_SEQ_TILES=1 or 0 forces them on or off). Measured (perf-log v29a, H100): a pack's
// answers bit for bit those alone, as with K and V by rows (wg64), and C16 +1.3 % over it; without
// invariance a pack keeps the global key tiles.
inline bool kv_sequence_tiles() {
  static const bool on = [] {
    const char* v = std::getenv("CLEF_KV_SEQ_TILES");
    if (v && std::strcmp(v, "1") == 0) return true;
    if (v && std::strcmp(v, "0") == 0) return false;
    return batch_invariant();
  }();
  return on;
}

}  // namespace clef::engine::cuda

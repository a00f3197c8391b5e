// GQA attention core (docs/spec/model.md §3): A = softmax(q k^T * scale) v per query head, query
// head j reading kv head j / (n_heads / n_kv_heads); causal by default (the backbone), or
// non-causal within each packed sequence (the vision tower's segments, docs/spec/media.md §7).
// Inputs are the already normed/roped q and k. Layouts (contiguous, row-major): q [T, n_heads,
// head_dim], k/v [T, n_kv_heads, head_dim], out [T, n_heads, head_dim]. head_dim: one the kernels
// are built for (attention_padded_head_dim: 72 (the vision tower's), 80 or a multiple of 32, at
// most 256); a model head dim without a kernel is zero-padded to attention_padded_head_dim(hd)
// columns, passing its own scale 1/sqrt(hd) (the zero columns add nothing to q k^T, and give zero
// output columns).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace clef::engine::cuda {

// Sequences packed into the T rows (a device table filled by engine/cuda/packing.h, 16-byte
// aligned): tile slot i = {q0, begin, end, block0} makes query rows [q0, min(q0 + rows, end))
// attend keys [begin, row] of their sequence [begin, end) (causal), or every key [begin, end)
// (non-causal) (rows = attention_rows_per_tile); q0 < 0 marks an unused slot. Tiles never straddle
// two sequences. The grid is tile_slots wide, so one captured graph serves every packing that fits.
// tiles null (tile_slots 0): one sequence of T rows, with causal and scale as given. Without an
// AttnSequences (null): one causal sequence of T rows, scale 1/sqrt(head_dim).
struct AttnSequences {
  const int32_t* tiles = nullptr;  // [tile_slots][4]
  int tile_slots = 0;
  bool causal = true;  // false: each query row attends every key of its sequence [begin, end)
  float scale = 0.f;   // score scale (finite, >= 0); 0 = 1/sqrt(head_dim). A zero-padded head keeps
                       // its true scale.
  // For kernels that read K and V in key tiles (kv_tiles.h): > 0, the per-sequence layout with
  // this many blocks a kv head, each tile slot's 4th int its sequence's first block
  // (kv_seq_block0); 0, the global row layout (the 4th int unused).
  int kv_head_blocks = 0;
};

// Query rows per tile of the kernel the dispatcher runs for this shape (the packing's tile size:
// pack_tables / segment_tiles in engine/cuda/packing.h). Pass the same T, n_heads and (padded)
// head_dim as the attention call; causal and non-causal calls of one shape run the same tile size.
// generic: for attention_core_bf16(..., generic = true).
int attention_rows_per_tile(bool bf16, int T, int n_heads, int head_dim, bool generic = false);

// The smallest head_dim >= head_dim that both kernels are built for (65 -> 72, 73 -> 80); throws
// std::invalid_argument outside [1, 256].
int attention_padded_head_dim(int head_dim);

// Production path: flash-style tiles on the tensor cores (fp32 accumulation and online softmax in
// fp32): bf16 mma.sync on sm_80+, warpgroup MMAs on sm_90 at the head dims the Hopper kernel wins
// (tuning.h's attention_core_bf16_pick); generic: the mma.sync kernels everywhere (--kernels
// generic). Throws std::invalid_argument on bad shapes, std::runtime_error on launch failure.
void attention_core_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                         __nv_bfloat16* out, int T, int n_heads, int n_kv_heads, int head_dim,
                         cudaStream_t stream, const AttnSequences* seqs = nullptr,
                         bool generic = false);

// Parity path: fp32 everywhere (SIMT), same online-softmax algorithm.
void attention_core_f32(const float* q, const float* k, const float* v, float* out, int T,
                        int n_heads, int n_kv_heads, int head_dim, cudaStream_t stream,
                        const AttnSequences* seqs = nullptr);

}  // namespace clef::engine::cuda

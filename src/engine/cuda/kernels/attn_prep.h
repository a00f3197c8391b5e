// Full-attention input preparation and output gate (docs/spec/model.md §3), storage type E as in
// norm.h; generic and vec8 variants picked by `path` (kernel_path.h), <op>_variant names the one
// that runs for given shapes (16-byte aligned pointers assumed).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/quantize.h"

namespace clef::engine::cuda {

// Full-attention input preparation from proj [T, ld] = [q/gate interleaved per head | k | v]:
// q, k = RMSNorm1p per head (q_norm / k_norm weights), partial rotate-half RoPE on the first rd
// dims at row t's position (bf16 cos/sin in bf16 mode), v copied. Outputs contiguous q [T, nh, hd],
// k, v [T, nkv, hd].
struct AttnPrepArgs {
  int T, ld, nh, nkv, hd, rd;
  float eps;
  const float* inv_freq;  // device, rd/2 values (fp32 like transformers, see rope_inv_freq)
  // device [T]: each row's position in its sequence (packed sequences restart at 0); null = the
  // row index (one sequence).
  const int32_t* positions = nullptr;
  // device [3][T] (temporal, height, width) rotary positions of a request with media; null = 1-D
  // (positions above). Set, frequency i takes its position from axis 1 if i % 3 == 1 and
  // i < 3 * mrope_section[1], axis 2 if i % 3 == 2 and i < 3 * mrope_section[2], else axis 0
  // (interleaved, docs/spec/media.md §6; CPU: mrope_tables).
  const int32_t* mrope_positions = nullptr;
  int mrope_section[3] = {0, 0, 0};  // e.g. {11, 11, 10}
  // k and v written in key tiles (attention/kv_tiles.h: kv_tiled_elems(T, nkv, hd) elements
  // each, the rows of the last tile past T zeros) for the Hopper kernels that read them (wg64te,
  // wg64ote); hd a multiple of 16.
  bool kv_tiled = false;
  // With kv_tiled, per-sequence key tiles (a packed forward; kv_tiles.h): device [T], row t's
  // tiled row (PackTables::kv_rows), kv_head_blocks blocks a kv head; only rows < T are written
  // (the caller zeroes the tiles once a forward). Null: the global row layout.
  const int32_t* kv_rows = nullptr;
  int kv_head_blocks = 0;
};
template <typename E>
void attn_prep(const E* proj, const float* q_norm_w, const float* k_norm_w, const AttnPrepArgs& a,
               E* q, E* k, E* v, KernelPath path, cudaStream_t s);
// "attn_prep_vec8" or "attn_prep_generic" (+ "_kv_tiles" with kv_tiled).
const char* attn_prep_variant(const AttnPrepArgs& a, KernelPath path);

// attn[t, h, :] *= sigmoid(gate[t, h, :]), gate at proj[t, h*2*hd + hd + i] (row stride ld).
template <typename E>
void attn_output_gate(E* attn, const E* proj, int ld, int T, int nh, int hd, KernelPath path,
                      cudaStream_t s);
// "attn_output_gate_vec8" or "attn_output_gate_generic".
const char* attn_output_gate_variant(int ld, int hd, KernelPath path);

// The output gate as the FP8 producer of o_proj (bf16 only): the gated values (as
// attn_output_gate computes them; written back into attn when `store`) quantised per row per 128
// channels into f inside the kernel, equal to quantize_rows_e4m3 of attn_output_gate's output.
// nh * hd up to 23552.
void attn_output_gate_fp8(__nv_bfloat16* attn, const __nv_bfloat16* proj, int ld, int T, int nh,
                          int hd, bool store, const Fp8Rows& f, cudaStream_t s);

// inv_freq[i] = 1 / theta^(2i / rd) in fp32, i < rd/2 (as transformers computes it): the host table
// behind AttnPrepArgs::inv_freq.
std::vector<float> rope_inv_freq(int rd, double theta);

}  // namespace clef::engine::cuda

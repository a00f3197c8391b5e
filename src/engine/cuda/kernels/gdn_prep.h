// Gated DeltaNet input preparation (docs/spec/model.md §3), storage type E as in norm.h; generic
// and tile (16-byte vector, loads staged in shared memory) variants picked by `path`
// (kernel_path.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernel_path.h"

namespace clef::engine::cuda {

// Gated DeltaNet input preparation from the fused projection proj [T, ld] = [qkv | z | b | a]:
// causal depthwise conv (kernel K, zero history before each sequence's first row) + SiLU over the
// qkv columns (rounded to E twice like the bf16 reference), q/k L2-normalised per head in fp32 (q
// also scaled by 1/sqrt(dk)), beta = sigmoid(b) (rounded to E), g = -exp(A_log) * softplus(a +
// dt_bias) in fp32. Outputs are fp32: q, k [T, Hk, dk], v [T, Hv, dv], g, beta [T, Hv].
struct GdnPrepArgs {
  int T, ld, Hk, Hv, dk, dv, K;
  int b_offset, a_offset;  // column offsets of b and a inside proj
  // device [T]: each row's position in its sequence (packed sequences restart at 0, so no tap
  // reaches into the previous sequence); null = the row index (one sequence).
  const int32_t* positions = nullptr;
  // The tile variant's tokens per block: 4, 8, 12 or 16 (fp32 storage: 4 or 8), the same outputs
  // bit for bit; 0 = picked from T and the grid. For the tests and workbench_gdn_prep's sweep.
  int tile_tokens = 0;
};
template <typename E>
void gdn_conv_prep(const E* proj, const E* conv_w, const float* A_log, const float* dt_bias,
                   const GdnPrepArgs& a, float* q, float* k, float* v, float* g, float* beta,
                   KernelPath path, cudaStream_t s);
// The same preparation with the q, k, v outputs in the bf16 form of gdn/gdn.h GdnInputs (the
// tensor-core GDN path): xq, xk [T, Hk, dk] and xv [T, Hv, dv] are the conv + SiLU values (bf16,
// the values the fp32 form normalises), rq = rsqrt(sum xq^2 + 1e-6) / sqrt(dk) and
// rk = rsqrt(sum xk^2 + 1e-6) per (token, key head) in fp32 [T, Hk]; g and beta as above.
struct GdnPrepBf16Out {
  __nv_bfloat16* xq = nullptr;
  __nv_bfloat16* xk = nullptr;
  __nv_bfloat16* xv = nullptr;
  float* rq = nullptr;
  float* rk = nullptr;
  float* g = nullptr;
  float* beta = nullptr;
};
void gdn_conv_prep_bf16x(const __nv_bfloat16* proj, const __nv_bfloat16* conv_w, const float* A_log,
                         const float* dt_bias, const GdnPrepArgs& a, const GdnPrepBf16Out& out,
                         KernelPath path, cudaStream_t s);
// "gdn_conv_prep_tile" or "gdn_conv_prep_generic" for these shapes (16-byte aligned pointers).
const char* gdn_conv_prep_variant(const GdnPrepArgs& a, KernelPath path);
// The same for gdn_conv_prep_bf16x: "gdn_conv_prep_bf16x_tile" or "gdn_conv_prep_bf16x_generic".
const char* gdn_conv_prep_bf16x_variant(const GdnPrepArgs& a, KernelPath path);

}  // namespace clef::engine::cuda

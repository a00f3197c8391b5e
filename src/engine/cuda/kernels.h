// Element-wise and row-wise kernels of the backbone (spec/model.md §3). Each is templated on the
// storage type E (__nv_bfloat16 = production, float = parity mode); arithmetic is fp32 and, for
// bf16, results are rounded exactly where the reference's bf16 run rounds. CPU references for each
// are in reference.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace clef::engine::cuda {

// out[t, :] = table[ids[t], :]  (D columns).
template <typename E>
void embed_gather(const E* table, const int32_t* ids, E* out, int T, int D, cudaStream_t s);

// out = RMSNorm1p(x; w) per row: x * rsqrt(mean(x^2) + eps) * (1 + w), fp32 then rounded to E.
template <typename E>
void rms_norm_1p(const E* x, int ldx, const float* w, E* out, int ldo, int rows, int D, float eps,
                 cudaStream_t s);

// Gated DeltaNet input preparation from the fused projection proj [T, ld] = [qkv | z | b | a]:
// causal depthwise conv (kernel K, zero history) + SiLU over the qkv columns (rounded to E twice
// like the bf16 reference), q/k L2-normalised per head in fp32 (q also scaled by 1/sqrt(dk)), beta
// = sigmoid(b) (rounded to E), g = -exp(A_log) * softplus(a + dt_bias) in fp32. Outputs are fp32:
// q, k [T, Hk, dk], v [T, Hv, dv], g, beta [T, Hv].
struct GdnPrepArgs {
  int T, ld, Hk, Hv, dk, dv, K;
  int b_offset, a_offset;  // column offsets of b and a inside proj
};
template <typename E>
void gdn_conv_prep(const E* proj, const E* conv_w, const float* A_log, const float* dt_bias,
                   const GdnPrepArgs& a, float* q, float* k, float* v, float* g, float* beta,
                   cudaStream_t s);

// y[t, h, :] = (RMSNorm(o[t, h, :]) * w) * silu(z[t, h, :]) per value head, plain w (no 1+),
// rounded like the reference (norm -> E, * w -> E, * silu(z) in fp32 -> E). o: [T, H*dv]
// contiguous, z row stride ldz.
template <typename E>
void gated_rms_norm(const E* o, const E* z, int ldz, const float* w, E* y, int T, int H, int dv,
                    float eps, cudaStream_t s);

// Full-attention input preparation from proj [T, ld] = [q/gate interleaved per head | k | v]:
// q, k = RMSNorm1p per head (q_norm / k_norm weights), partial rotate-half RoPE on the first rd
// dims at position t (bf16 cos/sin in bf16 mode), v copied. Outputs contiguous q [T, nh, hd], k, v
// [T, nkv, hd].
struct AttnPrepArgs {
  int T, ld, nh, nkv, hd, rd;
  float eps;
  const float* inv_freq;  // device, rd/2 values (fp32 like transformers)
};
template <typename E>
void attn_prep(const E* proj, const float* q_norm_w, const float* k_norm_w, const AttnPrepArgs& a,
               E* q, E* k, E* v, cudaStream_t s);

// attn[t, h, :] *= sigmoid(gate[t, h, :]), gate at proj[t, h*2*hd + hd + i] (row stride ld).
template <typename E>
void attn_output_gate(E* attn, const E* proj, int ld, int T, int nh, int hd, cudaStream_t s);

// out[t, i] = silu(gu[t, i]) * gu[t, I + i]   (gu = fused gate|up output [T, 2I]).
template <typename E>
void swiglu(const E* gu, E* out, int T, int I, cudaStream_t s);

// Float copy of E rows (for dumping hidden states): out[t*D + i] = float(in[t*D + i]).
template <typename E>
void to_float(const E* in, float* out, size_t n, cudaStream_t s);

}  // namespace clef::engine::cuda

// Causal GQA attention core (docs/spec/model.md §3): A = causal softmax(q k^T / sqrt(hd)) v per
// query head, query head j reading kv head j / (n_heads / n_kv_heads). Inputs are the already
// normed/roped q and k. Layouts (contiguous, row-major): q [T, n_heads, head_dim], k/v [T,
// n_kv_heads, head_dim], out [T, n_heads, head_dim]. head_dim: a multiple of 32, at most 256.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace clef::engine::cuda {

// Production path: flash-style tiles on the tensor cores (bf16 mma.sync, fp32 accumulation and
// online softmax in fp32), sm_80+. Throws std::invalid_argument on bad shapes, std::runtime_error
// on launch failure.
void attention_core_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                         __nv_bfloat16* out, int T, int n_heads, int n_kv_heads, int head_dim,
                         cudaStream_t stream);

// Parity path: fp32 everywhere (SIMT), same online-softmax algorithm.
void attention_core_f32(const float* q, const float* k, const float* v, float* out, int T,
                        int n_heads, int n_kv_heads, int head_dim, cudaStream_t stream);

}  // namespace clef::engine::cuda

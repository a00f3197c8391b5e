// The joint head's small kernels (docs/spec/model.md §4): LayerNorm, bias/GELU, span means, the
// LM-head row gather, the option-attention summary and the scorer (its attention:
// head_attention.h). All arithmetic is fp32 (the final scoring dots in fp64); GEMMs go through
// gemm/gemm.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace clef::engine::cuda::head_kernels {

// y = LayerNorm(x) per row of n (PyTorch: biased variance, eps inside the sqrt). Writes y and/or
// y_bf16 (either may be null). X is float or __nv_bfloat16.
template <typename X>
void layer_norm(const X* x, int rows, int n, const float* w, const float* b, float eps, float* y,
                __nv_bfloat16* y_bf16, cudaStream_t s);

// y[r, i] += bias[i], then y = gelu_erf(y) when gelu.
void bias_act(float* y, int rows, int n, const float* bias, bool gelu, cudaStream_t s);

void to_bf16(const float* x, __nv_bfloat16* y, size_t n, cudaStream_t s);

// The head's few-row linears: y[m, n] = act((sum_k x[m, k] w[n, k] (+ y[m, n] when accumulate)) +
// bias[n]) for m < M, n < N (x [M, K] fp32, w [N, K] bf16, y [M, N]; bias may be null; act =
// gelu_erf or identity). One warp per output column streams its weight row once for up to 8 rows of
// x (weights dominate: the head's weights are bf16 in every release, so this reads half the bytes
// of an fp32 GEMM, with the same fp32 products). 16-byte loads when K % 8 == 0 and the rows are
// aligned, else a scalar path.
void skinny_linear(const float* x, int M, int K, const __nv_bfloat16* w, int N, const float* bias,
                   bool gelu, bool accumulate, float* y, cudaStream_t s);

// out[i, :] = mean of rows [spans[2i], spans[2i+1]) of src [*, n].
void span_mean(const float* src, int n, const int32_t* spans, int count, float* out,
               cudaStream_t s);

// out[i, :] = mean over t in span i of table[ids[t], :] (table [V, n], float or __nv_bfloat16).
template <typename E>
void lexical_mean(const E* table, int n, const int32_t* ids, const int32_t* spans, int count,
                  float* out, cudaStream_t s);

// x[r, :] += src[owner[r], :] for r < rows.
void add_rows_gathered(float* x, const float* src, const int32_t* owner, int rows, int n,
                       cudaStream_t s);

// Per question k (options first[k]..first[k+1]): a = softmax_j(O_j . f0_k / sqrt(W)), out_k = sum
// a_j O_j.
void option_summary(const float* O, const float* f0, const int32_t* first, int nq, int W,
                    int max_options, float* out, cudaStream_t s);

// F[k] = f0[k] + sn[k] + gp[req[k]] + type_emb[types[k]] (gp: one row per request).
void field_init(const float* f0, const float* sn, const float* gp, const int32_t* req,
                const float* type_emb, const int32_t* types, int nq, int W, float* F,
                cudaStream_t s);

// feat[j] = [F_k, u_j, F_k * u_j, |F_k - u_j|], k = owner[j].
void scorer_features(const float* F, const float* U, const int32_t* owner, int N, int W,
                     float* feat, cudaStream_t s);

// logit_j = prior_scale * <normalize(Lx_j), normalize(Q_k + g_req[k])> + gate * (joint_scale *
// cos(F_k, U_j) + residual_j), k = owner[j] (g: one row per request).
void final_logits(const float* Lx, const float* Q, const float* g, const int32_t* req,
                  const float* F, const float* U, const float* residual, const int32_t* owner,
                  int N, int D, int W, float prior_scale, float joint_scale, float gate,
                  float* logits, cudaStream_t s);

}  // namespace clef::engine::cuda::head_kernels

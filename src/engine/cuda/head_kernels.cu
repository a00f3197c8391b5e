#include "engine/cuda/head_kernels.h"

#include <stdexcept>
#include <string>

namespace clef::engine::cuda::head_kernels {
namespace {

constexpr int kThreads = 256;

void check(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("joint head kernel ") + what + ": " +
                             cudaGetErrorString(e));
}

__device__ __forceinline__ float ld(float x) {
  return x;
}
__device__ __forceinline__ float ld(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename V>
__device__ __forceinline__ V warp_sum(V v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over a block of kThreads threads; every thread gets the result.
template <typename V>
__device__ __forceinline__ V block_sum(V v) {
  __shared__ V part[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();  // part may still be read by the previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  V r = 0;
#pragma unroll
  for (int i = 0; i < kThreads / 32; ++i) r += part[i];
  return r;
}

__device__ __forceinline__ float gelu_erf(float x) {
  return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
}

template <typename X>
__global__ void layer_norm_kernel(const X* __restrict__ x, int n, const float* __restrict__ w,
                                  const float* __restrict__ b, float eps, float* __restrict__ y,
                                  __nv_bfloat16* __restrict__ yb) {
  const size_t r = blockIdx.x;
  const X* xr = x + r * n;
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += kThreads) s += ld(xr[i]);
  const float mean = block_sum(s) / n;
  float v = 0.f;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float d = ld(xr[i]) - mean;
    v += d * d;
  }
  const float rstd = rsqrtf(block_sum(v) / n + eps);
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float o = (ld(xr[i]) - mean) * rstd * w[i] + b[i];
    if (y) y[r * n + i] = o;
    if (yb) yb[r * n + i] = __float2bfloat16_rn(o);
  }
}

__global__ void bias_act_kernel(float* y, size_t total, int n, const float* __restrict__ bias,
                                bool gelu) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float v = y[i] + (bias ? bias[i % n] : 0.f);
    y[i] = gelu ? gelu_erf(v) : v;
  }
}

constexpr int kSkinnyRows = 8;  // rows of x per pass (accumulators per lane)

// One warp per output column n; lanes split k. VEC: 8 weights (16 bytes) per lane per step.
template <bool VEC>
__global__ void skinny_linear_kernel(const float* __restrict__ x, int M, int K,
                                     const __nv_bfloat16* __restrict__ w, int N,
                                     const float* __restrict__ bias, bool gelu, bool accumulate,
                                     float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  if (n >= N) return;
  const __nv_bfloat16* wr = w + static_cast<size_t>(n) * K;
  for (int m0 = 0; m0 < M; m0 += kSkinnyRows) {
    const int mb = min(kSkinnyRows, M - m0);
    const float* xb = x + static_cast<size_t>(m0) * K;
    float acc[kSkinnyRows] = {};
    if constexpr (VEC) {
#pragma unroll 8  // eight 16-byte weight loads in flight per lane: the loop is latency-bound
      for (int k = 8 * lane; k < K; k += 8 * 32) {
        const uint4 raw = __ldg(reinterpret_cast<const uint4*>(wr + k));
        const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
        float wf[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[i]));
          wf[2 * i] = f.x, wf[2 * i + 1] = f.y;
        }
#pragma unroll
        for (int m = 0; m < kSkinnyRows; ++m) {
          if (m >= mb) break;
          const float4 a =
              __ldg(reinterpret_cast<const float4*>(xb + static_cast<size_t>(m) * K + k));
          const float4 b =
              __ldg(reinterpret_cast<const float4*>(xb + static_cast<size_t>(m) * K + k + 4));
          acc[m] += a.x * wf[0] + a.y * wf[1] + a.z * wf[2] + a.w * wf[3] + b.x * wf[4] +
                    b.y * wf[5] + b.z * wf[6] + b.w * wf[7];
        }
      }
    } else {
      for (int k = lane; k < K; k += 32) {
        const float wv = __bfloat162float(wr[k]);
#pragma unroll
        for (int m = 0; m < kSkinnyRows; ++m)
          if (m < mb) acc[m] += xb[static_cast<size_t>(m) * K + k] * wv;
      }
    }
#pragma unroll
    for (int m = 0; m < kSkinnyRows; ++m) acc[m] = warp_sum(acc[m]);
      // lane m writes row m0 + m (static indexing keeps acc in registers)
#pragma unroll
    for (int m = 0; m < kSkinnyRows; ++m) {
      if (lane != m || m >= mb) continue;
      float* out = y + static_cast<size_t>(m0 + m) * N + n;
      float v = acc[m];
      if (accumulate) v += *out;
      if (bias) v += bias[n];
      *out = gelu ? gelu_erf(v) : v;
    }
  }
}

__global__ void to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y,
                               size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void span_mean_kernel(const float* __restrict__ src, int n,
                                 const int32_t* __restrict__ spans, float* __restrict__ out) {
  const int i = blockIdx.x;
  const int a = spans[2 * i], e = spans[2 * i + 1];
  const float inv = 1.f / static_cast<float>(e - a);
  for (int c = threadIdx.x; c < n; c += kThreads) {
    float acc = 0.f;
    for (int t = a; t < e; ++t) acc += src[static_cast<size_t>(t) * n + c];
    out[static_cast<size_t>(i) * n + c] = acc * inv;
  }
}

template <typename E>
__global__ void lexical_mean_kernel(const E* __restrict__ table, int n,
                                    const int32_t* __restrict__ ids,
                                    const int32_t* __restrict__ spans, float* __restrict__ out) {
  const int i = blockIdx.x;
  const int a = spans[2 * i], e = spans[2 * i + 1];
  const float inv = 1.f / static_cast<float>(e - a);
  for (int c = threadIdx.x; c < n; c += kThreads) {
    float acc = 0.f;
    for (int t = a; t < e; ++t) acc += ld(table[static_cast<size_t>(ids[t]) * n + c]);
    out[static_cast<size_t>(i) * n + c] = acc * inv;
  }
}

__global__ void add_rows_gathered_kernel(float* x, const float* __restrict__ src,
                                         const int32_t* __restrict__ owner, int n) {
  const size_t r = blockIdx.x;
  const float* s = src + static_cast<size_t>(owner[r]) * n;
  for (int c = threadIdx.x; c < n; c += kThreads) x[r * n + c] += s[c];
}

__global__ void option_summary_kernel(const float* __restrict__ O, const float* __restrict__ f0,
                                      const int32_t* __restrict__ first, int W,
                                      float* __restrict__ out) {
  extern __shared__ float a[];  // one weight per option of this question
  const int k = blockIdx.x, j0 = first[k], n = first[k + 1] - j0;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float* f = f0 + static_cast<size_t>(k) * W;
  const float scale = rsqrtf(static_cast<float>(W));
  for (int j = warp; j < n; j += kThreads / 32) {
    const float* o = O + static_cast<size_t>(j0 + j) * W;
    float d = 0.f;
    for (int i = lane; i < W; i += 32) d += o[i] * f[i];
    d = warp_sum(d);
    if (lane == 0) a[j] = d * scale;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // n is small (the options of one question)
    float mx = -INFINITY;
    for (int j = 0; j < n; ++j) mx = fmaxf(mx, a[j]);
    float s = 0.f;
    for (int j = 0; j < n; ++j) s += (a[j] = expf(a[j] - mx));
    for (int j = 0; j < n; ++j) a[j] /= s;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < W; i += kThreads) {
    float acc = 0.f;
    for (int j = 0; j < n; ++j) acc += a[j] * O[static_cast<size_t>(j0 + j) * W + i];
    out[static_cast<size_t>(k) * W + i] = acc;
  }
}

__global__ void field_init_kernel(const float* __restrict__ f0, const float* __restrict__ sn,
                                  const float* __restrict__ gp_rows,
                                  const int32_t* __restrict__ req,
                                  const float* __restrict__ type_emb,
                                  const int32_t* __restrict__ types, int W, float* __restrict__ F) {
  const size_t k = blockIdx.x;
  const float* te = type_emb + static_cast<size_t>(types[k]) * W;
  const float* gp = gp_rows + static_cast<size_t>(req[k]) * W;
  for (int i = threadIdx.x; i < W; i += kThreads)
    F[k * W + i] = f0[k * W + i] + sn[k * W + i] + gp[i] + te[i];
}

__global__ void scorer_features_kernel(const float* __restrict__ F, const float* __restrict__ U,
                                       const int32_t* __restrict__ owner, int W,
                                       float* __restrict__ feat) {
  const size_t j = blockIdx.x;
  const float* f = F + static_cast<size_t>(owner[j]) * W;
  const float* u = U + j * W;
  float* o = feat + j * 4 * W;
  for (int i = threadIdx.x; i < W; i += kThreads) {
    o[i] = f[i];
    o[W + i] = u[i];
    o[2 * W + i] = f[i] * u[i];
    o[3 * W + i] = fabsf(f[i] - u[i]);
  }
}

__global__ void final_logits_kernel(const float* __restrict__ Lx, const float* __restrict__ Q,
                                    const float* __restrict__ g_rows,
                                    const int32_t* __restrict__ req, const float* __restrict__ F,
                                    const float* __restrict__ U, const float* __restrict__ residual,
                                    const int32_t* __restrict__ owner, int D, int W,
                                    float prior_scale, float joint_scale, float gate,
                                    float* __restrict__ logits) {
  const int j = blockIdx.x, k = owner[j];
  const float* l = Lx + static_cast<size_t>(j) * D;
  const float* q = Q + static_cast<size_t>(k) * D;
  const float* g = g_rows + static_cast<size_t>(req[k]) * D;
  double ll = 0, aa = 0, la = 0;
  for (int i = threadIdx.x; i < D; i += kThreads) {
    const double a = static_cast<double>(q[i]) + g[i];
    ll += static_cast<double>(l[i]) * l[i];
    aa += a * a;
    la += l[i] * a;
  }
  ll = block_sum(ll);
  aa = block_sum(aa);
  la = block_sum(la);
  const float* f = F + static_cast<size_t>(k) * W;
  const float* u = U + static_cast<size_t>(j) * W;
  double ff = 0, uu = 0, fu = 0;
  for (int i = threadIdx.x; i < W; i += kThreads) {
    ff += static_cast<double>(f[i]) * f[i];
    uu += static_cast<double>(u[i]) * u[i];
    fu += static_cast<double>(f[i]) * u[i];
  }
  ff = block_sum(ff);
  uu = block_sum(uu);
  fu = block_sum(fu);
  if (threadIdx.x == 0) {
    const double prior = la / (fmax(sqrt(ll), 1e-12) * fmax(sqrt(aa), 1e-12));
    const double cosine = fu / (fmax(sqrt(ff), 1e-8) * fmax(sqrt(uu), 1e-8));
    const float joint = joint_scale * static_cast<float>(cosine) + residual[j];
    logits[j] = prior_scale * static_cast<float>(prior) + gate * joint;
  }
}

unsigned grid_for(size_t total) {
  const size_t b = (total + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 ? (b ? b : 1) : 65535);
}

}  // namespace

template <typename X>
void layer_norm(const X* x, int rows, int n, const float* w, const float* b, float eps, float* y,
                __nv_bfloat16* y_bf16, cudaStream_t s) {
  if (rows <= 0) return;
  layer_norm_kernel<X><<<rows, kThreads, 0, s>>>(x, n, w, b, eps, y, y_bf16);
  check("layer_norm");
}
template void layer_norm<float>(const float*, int, int, const float*, const float*, float, float*,
                                __nv_bfloat16*, cudaStream_t);
template void layer_norm<__nv_bfloat16>(const __nv_bfloat16*, int, int, const float*, const float*,
                                        float, float*, __nv_bfloat16*, cudaStream_t);

void bias_act(float* y, int rows, int n, const float* bias, bool gelu, cudaStream_t s) {
  const size_t total = static_cast<size_t>(rows) * n;
  if (total == 0 || (!bias && !gelu)) return;
  bias_act_kernel<<<grid_for(total), kThreads, 0, s>>>(y, total, n, bias, gelu);
  check("bias_act");
}

void skinny_linear(const float* x, int M, int K, const __nv_bfloat16* w, int N, const float* bias,
                   bool gelu, bool accumulate, float* y, cudaStream_t s) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) throw std::runtime_error("joint head kernel skinny_linear: K must be positive");
  const int blocks = (N + kThreads / 32 - 1) / (kThreads / 32);
  const bool vec = K % 8 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (vec)
    skinny_linear_kernel<true>
        <<<blocks, kThreads, 0, s>>>(x, M, K, w, N, bias, gelu, accumulate, y);
  else
    skinny_linear_kernel<false>
        <<<blocks, kThreads, 0, s>>>(x, M, K, w, N, bias, gelu, accumulate, y);
  check("skinny_linear");
}

void to_bf16(const float* x, __nv_bfloat16* y, size_t n, cudaStream_t s) {
  if (n == 0) return;
  to_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(x, y, n);
  check("to_bf16");
}

void span_mean(const float* src, int n, const int32_t* spans, int count, float* out,
               cudaStream_t s) {
  if (count <= 0) return;
  span_mean_kernel<<<count, kThreads, 0, s>>>(src, n, spans, out);
  check("span_mean");
}

template <typename E>
void lexical_mean(const E* table, int n, const int32_t* ids, const int32_t* spans, int count,
                  float* out, cudaStream_t s) {
  if (count <= 0) return;
  lexical_mean_kernel<E><<<count, kThreads, 0, s>>>(table, n, ids, spans, out);
  check("lexical_mean");
}
template void lexical_mean<float>(const float*, int, const int32_t*, const int32_t*, int, float*,
                                  cudaStream_t);
template void lexical_mean<__nv_bfloat16>(const __nv_bfloat16*, int, const int32_t*, const int32_t*,
                                          int, float*, cudaStream_t);

void add_rows_gathered(float* x, const float* src, const int32_t* owner, int rows, int n,
                       cudaStream_t s) {
  if (rows <= 0) return;
  add_rows_gathered_kernel<<<rows, kThreads, 0, s>>>(x, src, owner, n);
  check("add_rows_gathered");
}

void option_summary(const float* O, const float* f0, const int32_t* first, int nq, int W,
                    int max_options, float* out, cudaStream_t s) {
  if (nq <= 0) return;
  const size_t smem = static_cast<size_t>(max_options) * sizeof(float);
  if (smem > 48 * 1024)
    throw std::runtime_error("joint head: too many options in one question (" +
                             std::to_string(max_options) + ")");
  option_summary_kernel<<<nq, kThreads, smem, s>>>(O, f0, first, W, out);
  check("option_summary");
}

void field_init(const float* f0, const float* sn, const float* gp, const int32_t* req,
                const float* type_emb, const int32_t* types, int nq, int W, float* F,
                cudaStream_t s) {
  if (nq <= 0) return;
  field_init_kernel<<<nq, kThreads, 0, s>>>(f0, sn, gp, req, type_emb, types, W, F);
  check("field_init");
}

void scorer_features(const float* F, const float* U, const int32_t* owner, int N, int W,
                     float* feat, cudaStream_t s) {
  if (N <= 0) return;
  scorer_features_kernel<<<N, kThreads, 0, s>>>(F, U, owner, W, feat);
  check("scorer_features");
}

void final_logits(const float* Lx, const float* Q, const float* g, const int32_t* req,
                  const float* F, const float* U, const float* residual, const int32_t* owner,
                  int N, int D, int W, float prior_scale, float joint_scale, float gate,
                  float* logits, cudaStream_t s) {
  if (N <= 0) return;
  final_logits_kernel<<<N, kThreads, 0, s>>>(Lx, Q, g, req, F, U, residual, owner, D, W,
                                             prior_scale, joint_scale, gate, logits);
  check("final_logits");
}

}  // namespace clef::engine::cuda::head_kernels

// Backbone kernels (see kernels.h). One block per row (or per row and head); fp32 arithmetic
// throughout.
#include <algorithm>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.h"

namespace clef::engine::cuda {
namespace {

constexpr int kMaxPerThread = 4;  // head dims up to 4 * blockDim (512 with 128 threads)
// Row-sliced element-wise kernels: grid (rows, columns / kSlice), 8 independent elements per thread
// so that every load of a thread is in flight at once (one block per row walking the row was
// latency-bound).
constexpr int kSliceThreads = 256, kSlice = 8 * kSliceThreads;
constexpr int kNormRegs = 16;  // row values kept in registers by the RMSNorm kernel

template <typename E>
__global__ void embed_gather_kernel(const E* __restrict__ table, const int32_t* __restrict__ ids,
                                    E* __restrict__ out, int D) {
  const size_t t = blockIdx.x;
  const E* row = table + static_cast<size_t>(ids[t]) * D;
  const int i0 = blockIdx.y * kSlice + threadIdx.x;
#pragma unroll
  for (int r = 0; r < kSlice / kSliceThreads; ++r) {
    const int i = i0 + r * kSliceThreads;
    if (i < D) out[t * D + i] = row[i];
  }
}

template <typename E>
__global__ void rms_norm_1p_kernel(const E* __restrict__ x, int ldx, const float* __restrict__ w,
                                   E* __restrict__ out, int ldo, int D, float eps) {
  __shared__ float scratch[32];
  const E* xr = x + static_cast<size_t>(blockIdx.x) * ldx;
  E* orow = out + static_cast<size_t>(blockIdx.x) * ldo;
  float ss = 0.0f;
  if (D <=
      kNormRegs * static_cast<int>(blockDim.x)) {  // the row in registers: one pass over memory
    float v[kNormRegs];
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      v[k] = i < D ? to_f(xr[i]) : 0.0f;
      ss += v[k] * v[k];
    }
    const float r = rsqrtf(block_sum(ss, scratch) / static_cast<float>(D) + eps);
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < D) orow[i] = from_f<E>((v[k] * r) * (1.0f + w[i]));
    }
    return;
  }
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    const float v = to_f(xr[i]);
    ss += v * v;
  }
  const float r = rsqrtf(block_sum(ss, scratch) / static_cast<float>(D) + eps);
  for (int i = threadIdx.x; i < D; i += blockDim.x)
    orow[i] = from_f<E>((to_f(xr[i]) * r) * (1.0f + w[i]));
}

// grid (T, 2*Hk + Hv): one block per token and head of q, k or v.
template <typename E>
__global__ void gdn_conv_prep_kernel(const E* __restrict__ proj, const E* __restrict__ conv_w,
                                     const float* __restrict__ A_log,
                                     const float* __restrict__ dt_bias, GdnPrepArgs a,
                                     float* __restrict__ q, float* __restrict__ k,
                                     float* __restrict__ v, float* __restrict__ g,
                                     float* __restrict__ beta) {
  __shared__ float scratch[32];
  const int t = blockIdx.x, hy = blockIdx.y;
  int kind, head, hdim, base;  // kind: 0 q, 1 k, 2 v
  if (hy < a.Hk) {
    kind = 0, head = hy, hdim = a.dk, base = hy * a.dk;
  } else if (hy < 2 * a.Hk) {
    kind = 1, head = hy - a.Hk, hdim = a.dk, base = a.Hk * a.dk + head * a.dk;
  } else {
    kind = 2, head = hy - 2 * a.Hk, hdim = a.dv, base = 2 * a.Hk * a.dk + head * a.dv;
  }
  float val[kMaxPerThread];
  float ss = 0.0f;
#pragma unroll
  for (int r = 0; r < kMaxPerThread; ++r) {
    const int i = threadIdx.x + r * blockDim.x;
    val[r] = 0.0f;
    if (i < hdim) {
      const int ch = base + i;
      float acc = 0.0f;
      for (int j = 0; j < a.K; ++j) {
        const int tt = t - (a.K - 1) + j;
        if (tt >= 0)
          acc += to_f(conv_w[static_cast<size_t>(ch) * a.K + j]) *
                 to_f(proj[static_cast<size_t>(tt) * a.ld + ch]);
      }
      const float y = rnd<E>(silu_f(rnd<E>(acc)));
      val[r] = y;
      ss += y * y;
    }
  }
  if (kind == 2) {
#pragma unroll
    for (int r = 0; r < kMaxPerThread; ++r) {
      const int i = threadIdx.x + r * blockDim.x;
      if (i < hdim) v[(static_cast<size_t>(t) * a.Hv + head) * a.dv + i] = val[r];
    }
    if (threadIdx.x == 0) {
      const size_t row = static_cast<size_t>(t) * a.ld;
      const float b = to_f(proj[row + a.b_offset + head]);
      const float av = to_f(proj[row + a.a_offset + head]);
      beta[static_cast<size_t>(t) * a.Hv + head] = rnd<E>(sigmoid_f(b));
      g[static_cast<size_t>(t) * a.Hv + head] = -expf(A_log[head]) * softplus_f(av + dt_bias[head]);
    }
    return;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) + 1e-6f);
  const float scale = kind == 0 ? rsqrtf(static_cast<float>(a.dk)) : 1.0f;
  float* dst = (kind == 0 ? q : k) + (static_cast<size_t>(t) * a.Hk + head) * a.dk;
#pragma unroll
  for (int r = 0; r < kMaxPerThread; ++r) {
    const int i = threadIdx.x + r * blockDim.x;
    if (i < hdim) dst[i] = kind == 0 ? (val[r] * inv) * scale : val[r] * inv;
  }
}

// grid (T, H)
template <typename E>
__global__ void gated_rms_norm_kernel(const E* __restrict__ o, const E* __restrict__ z, int ldz,
                                      const float* __restrict__ w, E* __restrict__ y, int H, int dv,
                                      float eps) {
  __shared__ float scratch[32];
  const size_t t = blockIdx.x;
  const int h = blockIdx.y;
  const E* orow = o + (t * H + h) * dv;
  float val[kMaxPerThread];
  float ss = 0.0f;
#pragma unroll
  for (int r = 0; r < kMaxPerThread; ++r) {
    const int i = threadIdx.x + r * blockDim.x;
    val[r] = i < dv ? to_f(orow[i]) : 0.0f;
    ss += val[r] * val[r];
  }
  const float rs = rsqrtf(block_sum(ss, scratch) / static_cast<float>(dv) + eps);
#pragma unroll
  for (int r = 0; r < kMaxPerThread; ++r) {
    const int i = threadIdx.x + r * blockDim.x;
    if (i < dv) {
      const float n = rnd<E>(val[r] * rs);
      const float zw = rnd<E>(w[i] * n);
      const float zz = to_f(z[t * ldz + h * dv + i]);
      y[(t * H + h) * dv + i] = from_f<E>(zw * silu_f(zz));
    }
  }
}

// grid (T, nh + 2*nkv)
template <typename E>
__global__ void attn_prep_kernel(const E* __restrict__ proj, const float* __restrict__ qw,
                                 const float* __restrict__ kw, AttnPrepArgs a, E* __restrict__ q,
                                 E* __restrict__ k, E* __restrict__ v) {
  extern __shared__ float sm[];  // hd normalised values
  __shared__ float scratch[32];
  const int t = blockIdx.x, hy = blockIdx.y;
  const E* row = proj + static_cast<size_t>(t) * a.ld;
  if (hy >= a.nh + a.nkv) {  // v: plain copy
    const int h = hy - a.nh - a.nkv;
    const E* src = row + a.nh * 2 * a.hd + a.nkv * a.hd + h * a.hd;
    E* dst = v + (static_cast<size_t>(t) * a.nkv + h) * a.hd;
    for (int i = threadIdx.x; i < a.hd; i += blockDim.x) dst[i] = src[i];
    return;
  }
  const bool is_q = hy < a.nh;
  const int h = is_q ? hy : hy - a.nh;
  const E* src = is_q ? row + h * 2 * a.hd : row + a.nh * 2 * a.hd + h * a.hd;
  const float* w = is_q ? qw : kw;
  E* dst = is_q ? q + (static_cast<size_t>(t) * a.nh + h) * a.hd
                : k + (static_cast<size_t>(t) * a.nkv + h) * a.hd;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < a.hd; i += blockDim.x) {
    const float x = to_f(src[i]);
    ss += x * x;
  }
  const float rs = rsqrtf(block_sum(ss, scratch) / static_cast<float>(a.hd) + a.eps);
  for (int i = threadIdx.x; i < a.hd; i += blockDim.x)
    sm[i] = rnd<E>((to_f(src[i]) * rs) * (1.0f + w[i]));
  __syncthreads();
  const int half = a.rd / 2;
  for (int i = threadIdx.x; i < a.hd; i += blockDim.x) {
    if (i >= a.rd) {
      dst[i] = from_f<E>(sm[i]);
      continue;
    }
    const int fi = i < half ? i : i - half;
    const float ang = static_cast<float>(t) * a.inv_freq[fi];
    const float c = rnd<E>(cosf(ang)), s = rnd<E>(sinf(ang));
    const float rh = i < half ? -sm[i + half] : sm[i - half];
    dst[i] = from_f<E>(rnd<E>(sm[i] * c) + rnd<E>(rh * s));
  }
}

template <typename E>
__global__ void attn_output_gate_kernel(E* __restrict__ attn, const E* __restrict__ proj, int ld,
                                        int nh, int hd) {
  const size_t t = blockIdx.x;
  const int e0 = blockIdx.y * kSlice + threadIdx.x;
#pragma unroll
  for (int r = 0; r < kSlice / kSliceThreads; ++r) {
    const int e = e0 + r * kSliceThreads;
    if (e >= nh * hd) break;
    const int h = e / hd, i = e % hd;
    const float gate = rnd<E>(sigmoid_f(to_f(proj[t * ld + h * 2 * hd + hd + i])));
    attn[t * nh * hd + e] = from_f<E>(to_f(attn[t * nh * hd + e]) * gate);
  }
}

template <typename E>
__global__ void swiglu_kernel(const E* __restrict__ gu, E* __restrict__ out, int I) {
  const size_t t = blockIdx.x;
  const int i0 = blockIdx.y * kSlice + threadIdx.x;
#pragma unroll
  for (int r = 0; r < kSlice / kSliceThreads; ++r) {
    const int i = i0 + r * kSliceThreads;
    if (i >= I) break;
    const float gt = rnd<E>(silu_f(to_f(gu[t * 2 * I + i])));
    out[t * I + i] = from_f<E>(gt * to_f(gu[t * 2 * I + I + i]));
  }
}

template <typename E>
__global__ void to_float_kernel(const E* __restrict__ in, float* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = to_f(in[i]);
}

}  // namespace

template <typename E>
void embed_gather(const E* table, const int32_t* ids, E* out, int T, int D, cudaStream_t s) {
  if (T <= 0) return;
  embed_gather_kernel<E>
      <<<dim3(T, (D + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(table, ids, out, D);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void rms_norm_1p(const E* x, int ldx, const float* w, E* out, int ldo, int rows, int D, float eps,
                 cudaStream_t s) {
  if (rows <= 0) return;
  const int threads = std::min(1024, std::max(128, (D + kNormRegs - 1) / kNormRegs + 31) / 32 * 32);
  rms_norm_1p_kernel<E><<<rows, threads, 0, s>>>(x, ldx, w, out, ldo, D, eps);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void gdn_conv_prep(const E* proj, const E* conv_w, const float* A_log, const float* dt_bias,
                   const GdnPrepArgs& a, float* q, float* k, float* v, float* g, float* beta,
                   cudaStream_t s) {
  if (a.T <= 0) return;
  if (a.dk > 128 * kMaxPerThread || a.dv > 128 * kMaxPerThread)
    throw std::invalid_argument("gdn_conv_prep: head dim above 512");
  dim3 grid(a.T, 2 * a.Hk + a.Hv);
  gdn_conv_prep_kernel<E><<<grid, 128, 0, s>>>(proj, conv_w, A_log, dt_bias, a, q, k, v, g, beta);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void gated_rms_norm(const E* o, const E* z, int ldz, const float* w, E* y, int T, int H, int dv,
                    float eps, cudaStream_t s) {
  if (T <= 0) return;
  if (dv > 128 * kMaxPerThread) throw std::invalid_argument("gated_rms_norm: head dim above 512");
  gated_rms_norm_kernel<E><<<dim3(T, H), 128, 0, s>>>(o, z, ldz, w, y, H, dv, eps);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void attn_prep(const E* proj, const float* q_norm_w, const float* k_norm_w, const AttnPrepArgs& a,
               E* q, E* k, E* v, cudaStream_t s) {
  if (a.T <= 0) return;
  dim3 grid(a.T, a.nh + 2 * a.nkv);
  attn_prep_kernel<E><<<grid, 128, a.hd * sizeof(float), s>>>(proj, q_norm_w, k_norm_w, a, q, k, v);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void attn_output_gate(E* attn, const E* proj, int ld, int T, int nh, int hd, cudaStream_t s) {
  if (T <= 0) return;
  attn_output_gate_kernel<E>
      <<<dim3(T, (nh * hd + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(attn, proj, ld, nh, hd);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void swiglu(const E* gu, E* out, int T, int I, cudaStream_t s) {
  if (T <= 0) return;
  swiglu_kernel<E><<<dim3(T, (I + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(gu, out, I);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void to_float(const E* in, float* out, size_t n, cudaStream_t s) {
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<size_t>((n + 255) / 256, 4096));
  to_float_kernel<E><<<blocks, 256, 0, s>>>(in, out, n);
  CLEF_CUDA_LAUNCH_CHECK();
}

#define CLEF_INSTANTIATE(E)                                                                        \
  template void embed_gather<E>(const E*, const int32_t*, E*, int, int, cudaStream_t);             \
  template void rms_norm_1p<E>(const E*, int, const float*, E*, int, int, int, float,              \
                               cudaStream_t);                                                      \
  template void gdn_conv_prep<E>(const E*, const E*, const float*, const float*,                   \
                                 const GdnPrepArgs&, float*, float*, float*, float*, float*,       \
                                 cudaStream_t);                                                    \
  template void gated_rms_norm<E>(const E*, const E*, int, const float*, E*, int, int, int, float, \
                                  cudaStream_t);                                                   \
  template void attn_prep<E>(const E*, const float*, const float*, const AttnPrepArgs&, E*, E*,    \
                             E*, cudaStream_t);                                                    \
  template void attn_output_gate<E>(E*, const E*, int, int, int, int, cudaStream_t);               \
  template void swiglu<E>(const E*, E*, int, int, cudaStream_t);                                   \
  template void to_float<E>(const E*, float*, size_t, cudaStream_t);
CLEF_INSTANTIATE(float)
CLEF_INSTANTIATE(__nv_bfloat16)
#undef CLEF_INSTANTIATE

}  // namespace clef::engine::cuda

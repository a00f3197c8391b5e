// Backbone kernels (see kernels.h); fp32 arithmetic throughout. Each kernel has a vector path
// (16-byte loads/stores of 8 elements, sub-warp per head with shuffle reductions, several rows per
// block) taken when the host wrapper finds the pointers 16-byte aligned and the widths/strides
// multiples of 8 elements, and the original scalar path for everything else. Both paths compute
// the same fp32 expressions with the same rounding points; only the order of the partial sums of
// squares inside a reduction differs.
#include <algorithm>
#include <cstdint>
#include <stdexcept>

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

// Vector paths. Streaming kernels: 256 threads, kVecPerThread 16-byte chunks (8 elements) per
// thread and operand, all loads issued before any use.
constexpr int kVecThreads = 256, kVecPerThread = 2, kVecChunks = kVecPerThread * kVecThreads;
constexpr int kNormVec = 4;        // 8-element chunks of a row per thread in the vector RMSNorm
constexpr int kConvK = 4;          // conv taps handled by the vector GDN prep (Qwen3.5: 4)
constexpr int kPrepThreads = 128;  // vector GDN prep: 8 channels per thread, 1024 per block

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

// Where head item hy of token t lives. Items are ordered [q heads | k heads | v heads]; a proj
// row holds the q heads (each followed by its output gate, 2*hd per head), then k, then v.
// Offsets rather than pointers, so the kernels keep their __restrict__ (read-only) loads.
struct AttnPrepHead {
  enum Kind { Q, K, V } kind;
  size_t src;  // into proj
  size_t dst;  // into q, k or v
};
__device__ __forceinline__ AttnPrepHead attn_prep_head(const AttnPrepArgs& a, int t, int hy) {
  const size_t row = static_cast<size_t>(t) * a.ld;
  if (hy < a.nh)
    return {AttnPrepHead::Q, row + hy * 2 * a.hd, (static_cast<size_t>(t) * a.nh + hy) * a.hd};
  const int h = hy < a.nh + a.nkv ? hy - a.nh : hy - a.nh - a.nkv;
  const size_t dst = (static_cast<size_t>(t) * a.nkv + h) * a.hd;
  if (hy < a.nh + a.nkv) return {AttnPrepHead::K, row + a.nh * 2 * a.hd + h * a.hd, dst};
  return {AttnPrepHead::V, row + a.nh * 2 * a.hd + a.nkv * a.hd + h * a.hd, dst};
}

// grid (T, nh + 2*nkv)
template <typename E>
__global__ void attn_prep_kernel(const E* __restrict__ proj, const float* __restrict__ qw,
                                 const float* __restrict__ kw, AttnPrepArgs a, E* __restrict__ q,
                                 E* __restrict__ k, E* __restrict__ v) {
  extern __shared__ float sm[];  // hd normalised values
  __shared__ float scratch[32];
  const int t = blockIdx.x;
  const AttnPrepHead at = attn_prep_head(a, t, blockIdx.y);
  const E* src = proj + at.src;
  if (at.kind == AttnPrepHead::V) {  // plain copy
    E* dst = v + at.dst;
    for (int i = threadIdx.x; i < a.hd; i += blockDim.x) dst[i] = src[i];
    return;
  }
  const bool is_q = at.kind == AttnPrepHead::Q;
  const float* w = is_q ? qw : kw;
  E* dst = (is_q ? q : k) + at.dst;
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

// ---- vector paths ----------------------------------------------------------------------------

// Row copy in 16-byte words: grid (T, ceil(W / kVecChunks)), W words per row.
__global__ void embed_gather_vec_kernel(const uint4* __restrict__ table,
                                        const int32_t* __restrict__ ids, uint4* __restrict__ out,
                                        int W) {
  const size_t t = blockIdx.x;
  const uint4* row = table + static_cast<size_t>(ids[t]) * W;
  const int c0 = blockIdx.y * kVecChunks + threadIdx.x;
  uint4 v[kVecPerThread];
#pragma unroll
  for (int r = 0; r < kVecPerThread; ++r) {
    const int c = c0 + r * kVecThreads;
    if (c < W) v[r] = row[c];
  }
#pragma unroll
  for (int r = 0; r < kVecPerThread; ++r) {
    const int c = c0 + r * kVecThreads;
    if (c < W) out[t * W + c] = v[r];
  }
}

// One block per row, the row in registers (kNormVec chunks of 8 per thread), one __syncthreads.
template <typename E>
__global__ void rms_norm_1p_vec_kernel(const E* __restrict__ x, int ldx,
                                       const float* __restrict__ w, E* __restrict__ out, int ldo,
                                       int D, float eps) {
  __shared__ float scratch[32];
  const E* xr = x + static_cast<size_t>(blockIdx.x) * ldx;
  E* orow = out + static_cast<size_t>(blockIdx.x) * ldo;
  const int nc = D / 8;
  Vec8<E> raw[kNormVec];
#pragma unroll
  for (int k = 0; k < kNormVec; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    raw[k] = c < nc ? ld8(xr + 8 * c) : Vec8<E>{};
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kNormVec; ++k) {
    float v[8];
    unpack8(raw[k], v);
#pragma unroll
    for (int j = 0; j < 8; ++j) ss += v[j] * v[j];
  }
  const float r = rsqrtf(block_sum_once(ss, scratch) / static_cast<float>(D) + eps);
#pragma unroll
  for (int k = 0; k < kNormVec; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < nc) {
      float v[8], wv[8], o[8];
      unpack8(raw[k], v);
      load8f(w + 8 * c, wv);
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = (v[j] * r) * (1.0f + wv[j]);
      st8(orow + 8 * c, pack8<E>(o));
    }
  }
}

// grid (ceil(T / tpb), ceil(C / 8 / kPrepThreads)), C = 2*Hk*dk + Hv*dv conv channels. Thread =
// 8 consecutive channels (one 16-byte chunk of a proj row) for the block's tpb consecutive tokens:
// the K-row causal window slides in registers (each proj element is loaded once per block, plus
// K-1 halo rows), the next rows are prefetched. A q/k head is held by an aligned group of lpg =
// dk/8 lanes (a power of two), its L2 norm summed by shuffles. Blocks with blockIdx.y == 0 also
// write g and beta of their tokens.
template <typename E>
__global__ void __launch_bounds__(kPrepThreads)
    gdn_conv_prep_vec_kernel(const E* __restrict__ proj, const E* __restrict__ conv_w,
                             const float* __restrict__ A_log, const float* __restrict__ dt_bias,
                             GdnPrepArgs a, int tpb, int lpg, float* __restrict__ q,
                             float* __restrict__ k, float* __restrict__ v, float* __restrict__ g,
                             float* __restrict__ beta) {
  const int Cq = a.Hk * a.dk, Cv = a.Hv * a.dv, nc = (2 * Cq + Cv) / 8;
  const int t0 = blockIdx.x * tpb, t1 = min(t0 + tpb, a.T);
  if (blockIdx.y == 0) {
    for (int e = threadIdx.x; e < (t1 - t0) * a.Hv; e += blockDim.x) {
      const int t = t0 + e / a.Hv, head = e % a.Hv;
      const size_t row = static_cast<size_t>(t) * a.ld;
      const float b = to_f(proj[row + a.b_offset + head]);
      const float av = to_f(proj[row + a.a_offset + head]);
      beta[static_cast<size_t>(t) * a.Hv + head] = rnd<E>(sigmoid_f(b));
      g[static_cast<size_t>(t) * a.Hv + head] = -expf(A_log[head]) * softplus_f(av + dt_bias[head]);
    }
  }
  const int c = blockIdx.y * kPrepThreads + threadIdx.x;  // chunk: channels [8c, 8c + 8)
  const bool active = c < nc;
  const int ch = 8 * c;
  const int kind = ch < Cq ? 0 : (ch < 2 * Cq ? 1 : 2);  // q, k, v (a chunk never straddles)
  // Taps: conv_w[(ch + m) * K + j] = element m * K + j of the 32 contiguous values at ch * K.
  float cw[8][kConvK];
  {
    float f[4][8];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      unpack8(active ? ld8(conv_w + static_cast<size_t>(ch) * kConvK + 8 * i) : Vec8<E>{}, f[i]);
#pragma unroll
    for (int m = 0; m < 8; ++m)
#pragma unroll
      for (int j = 0; j < kConvK; ++j) cw[m][j] = f[(m * kConvK + j) / 8][(m * kConvK + j) % 8];
  }
  const E* col = proj + ch;
  auto load_row = [&](int t) {  // zeros outside [0, t1): never used (history) or never loaded
    return active && t >= 0 && t < t1 ? ld8(col + static_cast<size_t>(t) * a.ld) : Vec8<E>{};
  };
  // r0..r3 = rows t-3..t, r4, r5 = t+1, t+2 (in flight)
  Vec8<E> r0 = load_row(t0 - 3), r1 = load_row(t0 - 2), r2 = load_row(t0 - 1), r3 = load_row(t0),
          r4 = load_row(t0 + 1), r5 = load_row(t0 + 2);
  const float scale = rsqrtf(static_cast<float>(a.dk));
  for (int t = t0; t < t1; ++t) {
    const Vec8<E> r6 = load_row(t + 3);
    float x[kConvK][8];
    unpack8(r0, x[0]);
    unpack8(r1, x[1]);
    unpack8(r2, x[2]);
    unpack8(r3, x[3]);
    float y[8];
    float ss = 0.0f;
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kConvK; ++j)
        if (t - (kConvK - 1) + j >= 0) acc += cw[m][j] * x[j][m];
      y[m] = rnd<E>(silu_f(rnd<E>(acc)));
      ss += y[m] * y[m];
    }
    ss = group_sum(ss, lpg);  // every lane (v and inactive ones too): the shuffles need them all
    if (active) {
      if (kind == 2) {
        float* dst = v + static_cast<size_t>(t) * Cv + (ch - 2 * Cq);
        st8(dst, pack8<float>(y));
      } else {
        const float inv = rsqrtf(ss + 1e-6f);
        float o[8];
#pragma unroll
        for (int m = 0; m < 8; ++m) o[m] = kind == 0 ? (y[m] * inv) * scale : y[m] * inv;
        float* dst = kind == 0 ? q + static_cast<size_t>(t) * Cq + ch
                               : k + static_cast<size_t>(t) * Cq + (ch - Cq);
        st8(dst, pack8<float>(o));
      }
    }
    r0 = r1, r1 = r2, r2 = r3, r3 = r4, r4 = r5, r5 = r6;
  }
}

// Flat (token, head) rows of dv = 8 * (chunks) values; an aligned group of lpg lanes (a power of
// two >= dv / 8, <= 32) per row, 8 values per lane; 256 threads = 256 / lpg rows per block.
template <typename E>
__global__ void gated_rms_norm_vec_kernel(const E* __restrict__ o, const E* __restrict__ z, int ldz,
                                          const float* __restrict__ w, E* __restrict__ y, int T,
                                          int H, int dv, int lpg, float eps) {
  const size_t gid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t row = gid / lpg;  // t * H + h
  const int gl = static_cast<int>(gid % lpg);
  const bool active = row < static_cast<size_t>(T) * H && gl < dv / 8;
  const size_t t = active ? row / H : 0;
  const int h = active ? static_cast<int>(row % H) : 0;
  Vec8<E> ov{}, zv{};
  if (active) {
    ov = ld8(o + row * dv + 8 * gl);
    zv = ld8(z + t * ldz + h * dv + 8 * gl);
  }
  float val[8];
  unpack8(ov, val);
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) ss += val[j] * val[j];
  ss = group_sum(ss, lpg);
  if (!active) return;
  const float rs = rsqrtf(ss / static_cast<float>(dv) + eps);
  float wv[8], zz[8], res[8];
  load8f(w + 8 * gl, wv);
  unpack8(zv, zz);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float n = rnd<E>(val[j] * rs);
    const float zw = rnd<E>(wv[j] * n);
    res[j] = zw * silu_f(zz[j]);
  }
  st8(y + row * dv + 8 * gl, pack8<E>(res));
}

// One warp per (token, head) item, items ordered (t, [q heads | k heads | v heads]); lane l holds
// elements [8l, 8l + 8) of the head (hd <= 256). Rotate-half partner chunks (rd/2 a multiple of 8)
// come from lane l +- rd/16 by shuffles.
template <typename E>
__global__ void attn_prep_vec_kernel(const E* __restrict__ proj, const float* __restrict__ qw,
                                     const float* __restrict__ kw, AttnPrepArgs a,
                                     E* __restrict__ q, E* __restrict__ k, E* __restrict__ v) {
  const int lane = threadIdx.x & 31;
  const int nhy = a.nh + 2 * a.nkv;
  const size_t item = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (item >= static_cast<size_t>(a.T) * nhy) return;  // warp-uniform
  const int t = static_cast<int>(item / nhy), hy = static_cast<int>(item % nhy);
  const bool act = lane < a.hd / 8;
  const int i0 = 8 * lane;
  const AttnPrepHead at = attn_prep_head(a, t, hy);
  const E* src = proj + at.src;
  if (at.kind == AttnPrepHead::V) {  // plain copy
    if (act) st8(v + at.dst + i0, ld8(src + i0));
    return;
  }
  const bool is_q = at.kind == AttnPrepHead::Q;
  const float* w = is_q ? qw : kw;
  E* dst = (is_q ? q : k) + at.dst;
  float x[8];
  unpack8(act ? ld8(src + i0) : Vec8<E>{}, x);
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) ss += x[j] * x[j];
  const float rs = rsqrtf(warp_sum(ss) / static_cast<float>(a.hd) + a.eps);
  float n[8];
  if (act) {
    float wv[8];
    load8f(w + i0, wv);
#pragma unroll
    for (int j = 0; j < 8; ++j) n[j] = rnd<E>((x[j] * rs) * (1.0f + wv[j]));
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) n[j] = 0.0f;
  }
  const int half = a.rd / 2;
  const int src_lane = i0 < half ? lane + half / 8 : (i0 < a.rd ? lane - half / 8 : lane);
  float p[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) p[j] = __shfl_sync(0xffffffffu, n[j], src_lane);
  if (!act) return;
  float res[8];
  if (i0 >= a.rd) {
#pragma unroll
    for (int j = 0; j < 8; ++j) res[j] = n[j];
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = i0 + j;
      const int fi = i < half ? i : i - half;
      const float ang = static_cast<float>(t) * a.inv_freq[fi];
      const float c = rnd<E>(cosf(ang)), s = rnd<E>(sinf(ang));
      const float rh = i < half ? -p[j] : p[j];
      res[j] = rnd<E>(n[j] * c) + rnd<E>(rh * s);
    }
  }
  st8(dst + i0, pack8<E>(res));
}

// A row's 8-element chunks c0, c0 + kVecThreads, ... (< nc): out[c] = op(a[c], b[c]) element-wise,
// a / b / out located by a_at(c) / b_at(c) / out_at(c); every load is issued before any use.
template <typename E, typename At, typename Bt, typename Out, typename Op>
__device__ __forceinline__ void pairwise_chunks(int c0, int nc, At a_at, Bt b_at, Out out_at,
                                                Op op) {
  Vec8<E> av[kVecPerThread], bv[kVecPerThread];
#pragma unroll
  for (int r = 0; r < kVecPerThread; ++r) {
    const int c = c0 + r * kVecThreads;
    if (c < nc) av[r] = ld8(a_at(c)), bv[r] = ld8(b_at(c));
  }
#pragma unroll
  for (int r = 0; r < kVecPerThread; ++r) {
    const int c = c0 + r * kVecThreads;
    if (c < nc) {
      float a[8], b[8], res[8];
      unpack8(av[r], a);
      unpack8(bv[r], b);
#pragma unroll
      for (int j = 0; j < 8; ++j) res[j] = op(a[j], b[j]);
      st8(out_at(c), pack8<E>(res));
    }
  }
}

// grid (T, ceil(nh * hd / 8 / kVecChunks)); hd a multiple of 8, so a chunk lies in one head.
template <typename E>
__global__ void attn_output_gate_vec_kernel(E* __restrict__ attn, const E* __restrict__ proj,
                                            int ld, int nh, int hd) {
  const size_t t = blockIdx.x;
  const int hc = hd / 8;
  E* arow = attn + t * nh * hd;
  const E* prow = proj + t * ld;
  pairwise_chunks<E>(
      blockIdx.y * kVecChunks + threadIdx.x, nh * hc, [&](int c) { return arow + 8 * c; },
      [&](int c) { return prow + (c / hc) * 2 * hd + hd + 8 * (c % hc); },
      [&](int c) { return arow + 8 * c; },
      [](float x, float gt) { return x * rnd<E>(sigmoid_f(gt)); });
}

// grid (T, ceil(I / 8 / kVecChunks))
template <typename E>
__global__ void swiglu_vec_kernel(const E* __restrict__ gu, E* __restrict__ out, int I) {
  const size_t t = blockIdx.x;
  const E* row = gu + t * 2 * I;
  E* orow = out + t * I;
  pairwise_chunks<E>(
      blockIdx.y * kVecChunks + threadIdx.x, I / 8, [&](int c) { return row + 8 * c; },
      [&](int c) { return row + I + 8 * c; }, [&](int c) { return orow + 8 * c; },
      [](float g, float u) { return rnd<E>(silu_f(g)) * u; });
}

// n8 chunks of 8 by 16-byte accesses (grid-stride), then the n % 8 tail elements.
template <typename E>
__global__ void to_float_vec_kernel(const E* __restrict__ in, float* __restrict__ out, size_t n) {
  const size_t n8 = n / 8, stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t gid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (size_t c = gid; c < n8; c += stride) {
    float f[8];
    load8f(in + 8 * c, f);
    st8(out + 8 * c, pack8<float>(f));
  }
  if (gid < n - 8 * n8) out[8 * n8 + gid] = to_f(in[8 * n8 + gid]);
}

}  // namespace

namespace {
bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}
}  // namespace

template <typename E>
void embed_gather(const E* table, const int32_t* ids, E* out, int T, int D, cudaStream_t s) {
  if (T <= 0) return;
  const size_t row_bytes = static_cast<size_t>(D) * sizeof(E);
  if (row_bytes % 16 == 0 && aligned16(table) && aligned16(out)) {
    const int W = static_cast<int>(row_bytes / 16);
    embed_gather_vec_kernel<<<dim3(T, (W + kVecChunks - 1) / kVecChunks), kVecThreads, 0, s>>>(
        reinterpret_cast<const uint4*>(table), ids, reinterpret_cast<uint4*>(out), W);
  } else {
    embed_gather_kernel<E>
        <<<dim3(T, (D + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(table, ids, out, D);
  }
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void rms_norm_1p(const E* x, int ldx, const float* w, E* out, int ldo, int rows, int D, float eps,
                 cudaStream_t s) {
  if (rows <= 0) return;
  if (D % 8 == 0 && ldx % 8 == 0 && ldo % 8 == 0 && D / 8 <= kNormVec * 1024 && aligned16(x) &&
      aligned16(w) && aligned16(out)) {
    const int threads = std::max(32, (D / 8 + kNormVec - 1) / kNormVec + 31) / 32 * 32;
    rms_norm_1p_vec_kernel<E><<<rows, threads, 0, s>>>(x, ldx, w, out, ldo, D, eps);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
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
  const int lpg = a.dk / 8;  // lanes per q/k head in the vector path
  if (a.K == kConvK && a.dk % 8 == 0 && lpg <= 32 && (lpg & (lpg - 1)) == 0 &&
      (a.Hv * a.dv) % 8 == 0 && a.ld % 8 == 0 && aligned16(proj) && aligned16(conv_w) &&
      aligned16(q) && aligned16(k) && aligned16(v)) {
    const int nc = (2 * a.Hk * a.dk + a.Hv * a.dv) / 8;
    const int gy = (nc + kPrepThreads - 1) / kPrepThreads;
    // Tokens per block: up to 16 (halo re-reads 3/16, mostly L2 hits), fewer when T is short so
    // that about 2048 blocks still fill the GPU.
    const long long want = (static_cast<long long>(a.T) * gy + 2047) / 2048;
    const int tpb = static_cast<int>(std::min<long long>(16, std::max<long long>(4, want)));
    gdn_conv_prep_vec_kernel<E><<<dim3((a.T + tpb - 1) / tpb, gy), kPrepThreads, 0, s>>>(
        proj, conv_w, A_log, dt_bias, a, tpb, lpg, q, k, v, g, beta);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  dim3 grid(a.T, 2 * a.Hk + a.Hv);
  gdn_conv_prep_kernel<E><<<grid, 128, 0, s>>>(proj, conv_w, A_log, dt_bias, a, q, k, v, g, beta);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void gated_rms_norm(const E* o, const E* z, int ldz, const float* w, E* y, int T, int H, int dv,
                    float eps, cudaStream_t s) {
  if (T <= 0) return;
  if (dv > 128 * kMaxPerThread) throw std::invalid_argument("gated_rms_norm: head dim above 512");
  if (dv % 8 == 0 && dv <= 256 && ldz % 8 == 0 && aligned16(o) && aligned16(z) && aligned16(w) &&
      aligned16(y)) {
    int lpg = 1;
    while (lpg < dv / 8) lpg *= 2;
    const size_t threads = static_cast<size_t>(T) * H * lpg;
    gated_rms_norm_vec_kernel<E><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, s>>>(
        o, z, ldz, w, y, T, H, dv, lpg, eps);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  gated_rms_norm_kernel<E><<<dim3(T, H), 128, 0, s>>>(o, z, ldz, w, y, H, dv, eps);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void attn_prep(const E* proj, const float* q_norm_w, const float* k_norm_w, const AttnPrepArgs& a,
               E* q, E* k, E* v, cudaStream_t s) {
  if (a.T <= 0) return;
  if (a.hd % 8 == 0 && a.hd <= 256 && a.rd % 16 == 0 && a.rd <= a.hd && a.ld % 8 == 0 &&
      aligned16(proj) && aligned16(q_norm_w) && aligned16(k_norm_w) && aligned16(q) &&
      aligned16(k) && aligned16(v)) {
    const size_t warps = static_cast<size_t>(a.T) * (a.nh + 2 * a.nkv);
    attn_prep_vec_kernel<E><<<static_cast<unsigned>((warps + 7) / 8), 256, 0, s>>>(
        proj, q_norm_w, k_norm_w, a, q, k, v);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  dim3 grid(a.T, a.nh + 2 * a.nkv);
  attn_prep_kernel<E><<<grid, 128, a.hd * sizeof(float), s>>>(proj, q_norm_w, k_norm_w, a, q, k, v);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void attn_output_gate(E* attn, const E* proj, int ld, int T, int nh, int hd, cudaStream_t s) {
  if (T <= 0) return;
  if (hd % 8 == 0 && ld % 8 == 0 && aligned16(attn) && aligned16(proj)) {
    const int nc = nh * hd / 8;
    attn_output_gate_vec_kernel<E>
        <<<dim3(T, (nc + kVecChunks - 1) / kVecChunks), kVecThreads, 0, s>>>(attn, proj, ld, nh,
                                                                             hd);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  attn_output_gate_kernel<E>
      <<<dim3(T, (nh * hd + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(attn, proj, ld, nh, hd);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void swiglu(const E* gu, E* out, int T, int I, cudaStream_t s) {
  if (T <= 0) return;
  if (I % 8 == 0 && aligned16(gu) && aligned16(out)) {
    swiglu_vec_kernel<E>
        <<<dim3(T, (I / 8 + kVecChunks - 1) / kVecChunks), kVecThreads, 0, s>>>(gu, out, I);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  swiglu_kernel<E><<<dim3(T, (I + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(gu, out, I);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void to_float(const E* in, float* out, size_t n, cudaStream_t s) {
  if (n == 0) return;
  if (aligned16(in) && aligned16(out)) {
    const size_t n8 = std::max<size_t>(n / 8, 1);
    const int blocks = static_cast<int>(std::min<size_t>((n8 + 255) / 256, 4096));
    to_float_vec_kernel<E><<<blocks, 256, 0, s>>>(in, out, n);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
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

// Row kernels of the vision tower (see vision.h). Generic variants: one block per row (LayerNorm,
// the position embedding, the RoPE split, the scatter) or a grid-stride loop (GELU),
// scalar accesses. vec8 variants: 16-byte accesses, every load of a thread issued before any use
// (the generic ones were latency-bound at 16-24 % of HBM bandwidth, perf-log v10b).
#include "engine/cuda/kernels/vision.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/cuda/attention/kv_tiles.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/common.cuh"

namespace clef::engine::cuda {
namespace {

constexpr int kLnRegs = 16;  // row values per thread kept in registers by the LayerNorm
constexpr int kLnVec = 8;    // 8-element chunks per lane of the warp-per-row LayerNorm (D <= 2048)
constexpr int kLnWarps = 8;  // rows per block of the warp-per-row LayerNorm
constexpr int kRopeThreads = 512;  // target block size of the vec8 RoPE split (several rows)

// One block per row. x and out are not __restrict__: out may alias x (each thread writes only the
// elements it has read itself, after the last reduction).
template <typename E>
__global__ void layer_norm_kernel(const E* x, const float* __restrict__ w,
                                  const float* __restrict__ b, E* out, int D, float eps) {
  __shared__ float scratch[32];
  const E* xr = x + static_cast<size_t>(blockIdx.x) * D;
  E* orow = out + static_cast<size_t>(blockIdx.x) * D;
  const float fd = static_cast<float>(D);
  if (D <= kLnRegs * static_cast<int>(blockDim.x)) {  // the row in registers: one read
    float v[kLnRegs];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kLnRegs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      v[k] = i < D ? to_f(xr[i]) : 0.0f;
      sum += v[k];
    }
    const float mean = block_sum(sum, scratch) / fd;
    float sq = 0.0f;  // two passes: the variance of the centred values (no cancellation)
#pragma unroll
    for (int k = 0; k < kLnRegs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      const float d = i < D ? v[k] - mean : 0.0f;
      sq += d * d;
    }
    const float r = rsqrtf(block_sum(sq, scratch) / fd + eps);
#pragma unroll
    for (int k = 0; k < kLnRegs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < D) orow[i] = from_f<E>((v[k] - mean) * r * w[i] + b[i]);
    }
    return;
  }
  float sum = 0.0f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) sum += to_f(xr[i]);
  const float mean = block_sum(sum, scratch) / fd;
  float sq = 0.0f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    const float d = to_f(xr[i]) - mean;
    sq += d * d;
  }
  const float r = rsqrtf(block_sum(sq, scratch) / fd + eps);
  for (int i = threadIdx.x; i < D; i += blockDim.x)
    orow[i] = from_f<E>((to_f(xr[i]) - mean) * r * w[i] + b[i]);
}

// One warp per row, kLnVec chunks of 8 per lane in registers; warp shuffles only (no
// __syncthreads), so 4096 rows are 4096 independent warps. The same two-pass fp32 arithmetic as the
// generic kernel; only the order of the partial sums differs. out may alias x (each lane writes
// the chunks it has read itself, after both reductions).
template <typename E>
__global__ void layer_norm_vec8_kernel(const E* x, const float* __restrict__ w,
                                       const float* __restrict__ b, E* out, int rows, int D,
                                       float eps) {
  const int lane = threadIdx.x & 31;
  const size_t row = static_cast<size_t>(blockIdx.x) * kLnWarps + threadIdx.x / 32;
  if (row >= static_cast<size_t>(rows)) return;  // the whole warp leaves together
  const E* xr = x + row * D;
  E* orow = out + row * D;
  const int nc = D / 8;
  const float fd = static_cast<float>(D);
  Vec8<E> raw[kLnVec];
#pragma unroll
  for (int k = 0; k < kLnVec; ++k) {
    const int c = lane + 32 * k;
    raw[k] = c < nc ? ld8(xr + 8 * c) : Vec8<E>{};
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kLnVec; ++k) {
    float v[8];
    unpack8(raw[k], v);
#pragma unroll
    for (int j = 0; j < 8; ++j) sum += v[j];
  }
  const float mean = warp_sum(sum) / fd;
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kLnVec; ++k) {
    if (lane + 32 * k < nc) {
      float v[8];
      unpack8(raw[k], v);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float d = v[j] - mean;
        sq += d * d;
      }
    }
  }
  const float r = rsqrtf(warp_sum(sq) / fd + eps);
#pragma unroll
  for (int k = 0; k < kLnVec; ++k) {
    const int c = lane + 32 * k;
    if (c < nc) {
      float v[8], wv[8], bv[8], o[8];
      unpack8(raw[k], v);
      load8f(w + 8 * c, wv);
      load8f(b + 8 * c, bv);
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = (v[j] - mean) * r * wv[j] + bv[j];
      st8(orow + 8 * c, pack8<E>(o));
    }
  }
}

template <GeluKind K>
__device__ __forceinline__ float gelu_f(float x) {
  if constexpr (K == GeluKind::Tanh) {
    // PyTorch's GeluCUDAKernelImpl (approximate='tanh'): kBeta = sqrt(2) * (2 / sqrt(pi)) / 2.
    constexpr float kBeta = 0.7978845608028654f, kKappa = 0.044715f;
    const float inner = kBeta * (x + kKappa * (x * x * x));
    return 0.5f * x * (1.0f + tanhf(inner));
  } else {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  }
}

template <typename E, GeluKind K>
__global__ void gelu_generic_kernel(E* __restrict__ x, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = from_f<E>(gelu_f<K>(to_f(x[i])));
}

// n / 8 chunks by 16-byte accesses (grid-stride), then the n % 8 tail elements.
template <typename E, GeluKind K>
__global__ void gelu_vec8_kernel(E* __restrict__ x, size_t n) {
  const size_t n8 = n / 8, stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t gid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (size_t c = gid; c < n8; c += stride) {
    float f[8];
    load8f(x + 8 * c, f);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = gelu_f<K>(f[j]);
    st8(x + 8 * c, pack8<E>(f));
  }
  if (gid < n - 8 * n8) x[8 * n8 + gid] = from_f<E>(gelu_f<K>(to_f(x[8 * n8 + gid])));
}

// One axis of the bilinear interpolation (media.md §7), the closed form of
// vision_position_embedding in fp32, every operation rounded on its own (no contraction).
struct Tap {
  int lo, hi;
  float w_lo, w_hi;
};
__device__ __forceinline__ Tap pos_tap(int i, int n, int side) {
  const float src = __fdiv_rn(__fmul_rn(static_cast<float>(i), static_cast<float>(side - 1)),
                              static_cast<float>(max(n - 1, 1)));
  const float ff = floorf(src);
  const int f = static_cast<int>(ff);
  const float frac = __fsub_rn(src, ff);
  return {min(f, side - 1), min(f + 1, side - 1), __fsub_rn(1.0f, fabsf(frac)),
          fmaxf(0.0f, __fsub_rn(1.0f, fabsf(__fsub_rn(frac, 1.0f))))};
}

// The 4 table rows (element offsets) and weights of patch row p = s*h*w + i (slice s, patch i).
struct PosTaps {
  size_t idx[4];
  float wt[4];
};
__device__ __forceinline__ PosTaps pos_taps(size_t p, int side, int h, int w, int W) {
  const int hw = h * w;
  const int i = static_cast<int>(p % hw);
  // Block-major patch order (media::patch_coords): merge block i / 4 row-major over
  // the (h/2) x (w/2) blocks, cell (i / 2 % 2, i % 2) inside it.
  const int blk = i / 4, blocks_w = w / 2;
  const int r = blk / blocks_w * 2 + i / 2 % 2, c = blk % blocks_w * 2 + i % 2;
  const Tap tr = pos_tap(r, h, side), tc = pos_tap(c, w, side);
  return {
      {static_cast<size_t>(tr.lo * side + tc.lo) * W, static_cast<size_t>(tr.lo * side + tc.hi) * W,
       static_cast<size_t>(tr.hi * side + tc.lo) * W,
       static_cast<size_t>(tr.hi * side + tc.hi) * W},
      {__fmul_rn(tr.w_lo, tc.w_lo), __fmul_rn(tr.w_lo, tc.w_hi), __fmul_rn(tr.w_hi, tc.w_lo),
       __fmul_rn(tr.w_hi, tc.w_hi)}};
}

// x + the rounded interpolated embedding, from fp32 x and the 4 table values.
template <typename E>
__device__ __forceinline__ float pos_add(float x, const float (&tv)[4], const float (&wt)[4]) {
  const float p0 = __fmul_rn(tv[0], wt[0]), p1 = __fmul_rn(tv[1], wt[1]);
  const float p2 = __fmul_rn(tv[2], wt[2]), p3 = __fmul_rn(tv[3], wt[3]);
  const float pos = rnd<E>(__fadd_rn(__fadd_rn(__fadd_rn(p0, p1), p2), p3));
  return __fadd_rn(x, pos);
}

// grid (t*h*w, ceil(W / kSlice)): block row p = s*h*w + i (slice s, patch i).
template <typename E>
__global__ void pos_embed_add_kernel(E* __restrict__ x, int row0, const E* __restrict__ table,
                                     int side, int h, int w, int W) {
  const PosTaps t = pos_taps(blockIdx.x, side, h, w, W);
  E* xr = x + (static_cast<size_t>(row0) + blockIdx.x) * W;
  const int d0 = blockIdx.y * kSlice + threadIdx.x;
#pragma unroll
  for (int k = 0; k < kSlice / kSliceThreads; ++k) {
    const int d = d0 + k * kSliceThreads;
    if (d >= W) break;
    const float tv[4] = {to_f(table[t.idx[0] + d]), to_f(table[t.idx[1] + d]),
                         to_f(table[t.idx[2] + d]), to_f(table[t.idx[3] + d])};
    xr[d] = from_f<E>(pos_add<E>(to_f(xr[d]), tv, t.wt));
  }
}

// A thread per 8-element chunk of the rows (flat over rows x W / 8): 5 loads in flight per
// thread (x and the 4 table rows; the table is 5 MB, read from L2 after the first rows).
template <typename E>
__global__ void pos_embed_add_vec8_kernel(E* __restrict__ x, int row0, const E* __restrict__ table,
                                          int side, int h, int w, int W, size_t chunks) {
  const size_t g = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= chunks) return;
  const int nc = W / 8;
  const size_t p = g / nc;
  const int d = 8 * static_cast<int>(g - p * nc);
  const PosTaps t = pos_taps(p, side, h, w, W);
  E* xr = x + (static_cast<size_t>(row0) + p) * W + d;
  const Vec8<E> xv = ld8(xr), t0 = ld8(table + t.idx[0] + d), t1 = ld8(table + t.idx[1] + d),
                t2 = ld8(table + t.idx[2] + d), t3 = ld8(table + t.idx[3] + d);
  float xf[8], f0[8], f1[8], f2[8], f3[8], o[8];
  unpack8(xv, xf);
  unpack8(t0, f0);
  unpack8(t1, f1);
  unpack8(t2, f2);
  unpack8(t3, f3);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float tv[4] = {f0[j], f1[j], f2[j], f3[j]};
    o[j] = pos_add<E>(xf[j], tv, t.wt);
  }
  st8(xr, pack8<E>(o));
}

// The row's 2-D RoPE table, cos [hd/2] | sin [hd/2] (the first quarter of the frequencies from the
// patch row, the second from its column), filled by threads tid = 0, step, 2 * step, ...
// Slot i < hd / 2 of a row's cos/sin table: cs[i] = cos, cs[hd / 2 + i] = sin of its angle.
__device__ __forceinline__ void vision_rope_slot(float* cs, const VisionRopeArgs& a, size_t row,
                                                 int i) {
  const int half = a.hd / 2, quarter = a.hd / 4;
  const float ang = i < quarter
                        ? __fmul_rn(static_cast<float>(a.rc[2 * row]), a.inv_freq[i])
                        : __fmul_rn(static_cast<float>(a.rc[2 * row + 1]), a.inv_freq[i - quarter]);
  cs[i] = cosf(ang);
  cs[half + i] = sinf(ang);
}
__device__ __forceinline__ void vision_rope_table(float* cs, const VisionRopeArgs& a, size_t row,
                                                  int tid, int step) {
  for (int i = tid; i < a.hd / 2; i += step) vision_rope_slot(cs, a, row, i);
}

// One block per row: the row's hd/2 cos/sin values in shared memory, then every element of its
// q, k, v heads (hdp wide). Products and sums rounded like the CPU tower's apply_rope
// (x1*cos - x2*sin, x2*cos + x1*sin, no contraction).
template <typename E>
__global__ void vision_rope_split_kernel(const E* __restrict__ qkv, E* __restrict__ q,
                                         E* __restrict__ k, E* __restrict__ v, VisionRopeArgs a) {
  extern __shared__ float cs[];  // cos [hd/2] | sin [hd/2]
  const int half = a.hd / 2;
  const size_t row = blockIdx.x;
  vision_rope_table(cs, a, row, threadIdx.x, blockDim.x);
  __syncthreads();
  const int width = a.heads * a.hd, per = a.heads * a.hdp;
  const E* src = qkv + row * 3 * width;
  for (int e = threadIdx.x; e < 3 * per; e += blockDim.x) {
    const int part = e / per, rem = e - part * per;
    const int j = rem / a.hdp, i = rem - j * a.hdp;
    E* dst = (part == 0 ? q : part == 1 ? k : v) + row * per + rem;
    if (i >= a.hd) {
      *dst = from_f<E>(0.0f);
      continue;
    }
    const E* hs = src + static_cast<size_t>(part) * width + static_cast<size_t>(j) * a.hd;
    if (part == 2) {
      *dst = hs[i];
      continue;
    }
    const bool lo = i < half;
    const int slot = lo ? i : i - half;
    const float cv = cs[slot], sv = cs[half + slot];
    const float self = to_f(hs[i]), partner = to_f(hs[lo ? i + half : i - half]);
    const float o = lo ? __fsub_rn(__fmul_rn(self, cv), __fmul_rn(partner, sv))
                       : __fadd_rn(__fmul_rn(self, cv), __fmul_rn(partner, sv));
    *dst = from_f<E>(o);
  }
}

// 4 consecutive values of E: one 8-byte access for bf16, one 16-byte access for float (pointers
// aligned to that size).
template <typename E>
struct Vec4;
template <>
struct Vec4<__nv_bfloat16> {
  uint2 u;
};
template <>
struct Vec4<float> {
  float4 a;
};
__device__ __forceinline__ Vec4<__nv_bfloat16> ld4(const __nv_bfloat16* p) {
  return {*reinterpret_cast<const uint2*>(p)};
}
__device__ __forceinline__ Vec4<float> ld4(const float* p) {
  return {*reinterpret_cast<const float4*>(p)};
}
__device__ __forceinline__ void unpack4(const Vec4<__nv_bfloat16>& v, float* f) {
  f[0] = __uint_as_float(v.u.x << 16), f[1] = __uint_as_float(v.u.x & 0xffff0000u);
  f[2] = __uint_as_float(v.u.y << 16), f[3] = __uint_as_float(v.u.y & 0xffff0000u);
}
__device__ __forceinline__ void unpack4(const Vec4<float>& v, float* f) {
  f[0] = v.a.x, f[1] = v.a.y, f[2] = v.a.z, f[3] = v.a.w;
}

// Chunk i0 .. i0 + 7 of head j of a live row: q and k rotated, v copied (5 loads in flight: q and
// k's chunk and their partners' two 4-element groups, v's chunk); zeros where i0 is padding (q only
// within its hdp columns). cs: the row's cos/sin as the generic kernel computes them; the same
// rounded products and sums.
template <typename E>
__device__ __forceinline__ void rope_split_chunk(const E* __restrict__ qkv, const float* cs,
                                                 const VisionRopeArgs& a, size_t row, int j, int i0,
                                                 E* qd, E* kd, E* vd) {
  const int half = a.hd / 2;
  if (i0 >= a.hd) {  // a padding chunk (hd is a multiple of 8: never partly padding)
    if (i0 < a.hdp) st8(qd, Vec8<E>{});
    st8(kd, Vec8<E>{});
    st8(vd, Vec8<E>{});
    return;
  }
  const size_t width = static_cast<size_t>(a.heads) * a.hd;
  const E* hq = qkv + row * 3 * width + static_cast<size_t>(j) * a.hd;
  const E* hk = hq + width;
  // Partners of the 4-element groups at i0 and i0 + 4 (half is a multiple of 4: a group never
  // straddles the half).
  const int p0 = i0 < half ? i0 + half : i0 - half;
  const int p1 = i0 + 4 < half ? i0 + 4 + half : i0 + 4 - half;
  const Vec8<E> qs = ld8(hq + i0), ks = ld8(hk + i0), vs = ld8(hk + width + i0);
  const Vec4<E> qp0 = ld4(hq + p0), qp1 = ld4(hq + p1), kp0 = ld4(hk + p0), kp1 = ld4(hk + p1);
  st8(vd, vs);
  float cv[8], sv[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int i = i0 + e, slot = i < half ? i : i - half;
    cv[e] = cs[slot];
    sv[e] = cs[half + slot];
  }
  auto rotate = [&](const Vec8<E>& self_v, const Vec4<E>& pa, const Vec4<E>& pb, E* dst) {
    float self[8], partner[8], o[8];
    unpack8(self_v, self);
    unpack4(pa, partner);
    unpack4(pb, partner + 4);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      o[e] = i0 + e < half ? __fsub_rn(__fmul_rn(self[e], cv[e]), __fmul_rn(partner[e], sv[e]))
                           : __fadd_rn(__fmul_rn(self[e], cv[e]), __fmul_rn(partner[e], sv[e]));
    st8(dst, pack8<E>(o));
  };
  rotate(qs, qp0, qp1, qd);
  rotate(ks, kp0, kp1, kd);
}

// Block (heads * hdp / 8, rows per block): thread (x, y) is chunk c of head j of row
// blockIdx.x * blockDim.y + y and writes that chunk of q, k and v. The row's cos/sin in shared
// memory.
template <typename E>
__global__ void vision_rope_split_vec8_kernel(const E* __restrict__ qkv, E* __restrict__ q,
                                              E* __restrict__ k, E* __restrict__ v,
                                              VisionRopeArgs a) {
  extern __shared__ float cs_all[];  // per row of the block: cos [hd/2] | sin [hd/2]
  const size_t row = static_cast<size_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < static_cast<size_t>(a.rows);
  float* cs = cs_all + threadIdx.y * a.hd;
  if (live) vision_rope_table(cs, a, row, threadIdx.x, blockDim.x);
  __syncthreads();
  const int cph = a.hdp / 8;
  if (!live || static_cast<int>(threadIdx.x) >= a.heads * cph) return;
  const int j = threadIdx.x / cph, c = threadIdx.x - j * cph;
  const size_t out = (row * a.heads + j) * a.hdp + 8 * c;
  rope_split_chunk(qkv, cs, a, row, j, 8 * c, q + out, k + out, v + out);
}

// K and V into key tiles (attention/kv_tiles.h), q as above. Block: 8 rows x kRopeTileHeads heads
// x kv_tile_cols(hdp) / 8 chunks, thread t is row t % 8 of chunk t / 8, so that a warp writes four
// whole 128-byte core-matrix columns of the tiles (8 rows of one chunk are contiguous there) and
// reads 64 contiguous bytes of 8 rows. Grid: (every row of the last 64-row tile) / 8 x heads /
// kRopeTileHeads; rows past the end write zeros, as do the padding columns.
template <typename E>
__global__ void vision_rope_split_tiles_kernel(const E* __restrict__ qkv, E* __restrict__ q,
                                               E* __restrict__ k, E* __restrict__ v,
                                               VisionRopeArgs a, int heads_per_block) {
  // The 8 rows' tables sit hd + 1 floats apart: a warp's 8 rows x 4 chunks then read 32 distinct
  // banks (hd = 72 apart they hit 4 banks: 8-way conflicts); every thread computes table slots,
  // in one pass.
  extern __shared__ float cs_all[];  // 8 rows, hd + 1 apart: cos [hd/2] | sin [hd/2]
  const size_t row0 = static_cast<size_t>(blockIdx.x) * 8;
  const int half = a.hd / 2, ld = a.hd + 1;
  for (int e = threadIdx.x; e < 8 * half; e += blockDim.x) {
    const int i = e / half;
    if (row0 + i < static_cast<size_t>(a.rows))
      vision_rope_slot(cs_all + i * ld, a, row0 + i, e - i * half);
  }
  __syncthreads();
  const int cph = kv_tile_cols(a.hdp) / 8, r8 = threadIdx.x % 8, cl = threadIdx.x / 8;
  if (cl >= heads_per_block * cph) return;
  const size_t row = row0 + r8;
  const int j = blockIdx.y * heads_per_block + cl / cph, i0 = 8 * (cl % cph);
  const size_t kv_out = kv_tiled_index(static_cast<int>(row), j, i0, a.rows, a.hdp);
  if (row >= static_cast<size_t>(a.rows)) {  // the last tile's padding rows
    st8(k + kv_out, Vec8<E>{});
    st8(v + kv_out, Vec8<E>{});
    return;
  }
  const size_t out = (row * a.heads + j) * a.hdp + i0;
  rope_split_chunk(qkv, cs_all + r8 * ld, a, row, j, i0, q + out, k + kv_out, v + kv_out);
}

template <typename E>
__global__ void scatter_rows_generic_kernel(E* __restrict__ dst, int ld, const E* __restrict__ src,
                                            const int32_t* __restrict__ dst_rows, int D) {
  const size_t i = blockIdx.x;
  E* drow = dst + static_cast<size_t>(dst_rows[i]) * ld;
  const E* srow = src + i * D;
  const int j0 = blockIdx.y * kSlice + threadIdx.x;
#pragma unroll
  for (int r = 0; r < kSlice / kSliceThreads; ++r) {
    const int j = j0 + r * kSliceThreads;
    if (j < D) drow[j] = srow[j];
  }
}

// Rows in 16-byte words: grid (n, ceil(words / kVecChunks)), words per row, ld_words row stride.
__global__ void scatter_rows_vec_kernel(uint4* __restrict__ dst, int ld_words,
                                        const uint4* __restrict__ src,
                                        const int32_t* __restrict__ dst_rows, int words) {
  const size_t i = blockIdx.x;
  uint4* drow = dst + static_cast<size_t>(dst_rows[i]) * ld_words;
  const uint4* srow = src + i * words;
  const int c0 = blockIdx.y * kVecChunks + threadIdx.x;
  uint4 v[kVecPerThread];
#pragma unroll
  for (int r = 0; r < kVecPerThread; ++r) {
    const int c = c0 + r * kVecThreads;
    if (c < words) v[r] = srow[c];
  }
#pragma unroll
  for (int r = 0; r < kVecPerThread; ++r) {
    const int c = c0 + r * kVecThreads;
    if (c < words) drow[c] = v[r];
  }
}

int grid_stride_blocks(size_t items) {
  return static_cast<int>(std::min<size_t>((items + 255) / 256, 8192));
}

bool layer_norm_vec8_shape(int D) {
  return D % 8 == 0 && D / 8 <= 32 * kLnVec;
}
bool pos_embed_add_vec8_shape(int W) {
  return W % 8 == 0;
}
// Heads per block of the key-tiled RoPE split (8 rows x heads x chunks threads, at most
// kRopeThreads), 0 when there is none (then no key tiles).
int rope_tile_heads_per_block(const VisionRopeArgs& a) {
  if (a.hd % 8 != 0 || a.hdp % 8 != 0) return 0;
  const int per_head = 8 * (kv_tile_cols(a.hdp) / 8);
  for (int h = std::min(a.heads, kRopeThreads / per_head); h >= 1; --h)
    if (a.heads % h == 0) return h;
  return 0;
}
// Rows per block of the vec8 RoPE split, 0 when the shape is the generic kernel's.
int rope_vec8_rows_per_block(const VisionRopeArgs& a) {
  if (a.hd % 8 != 0 || a.hdp % 8 != 0) return 0;
  const int per_row = a.heads * (a.hdp / 8);
  if (per_row > 1024) return 0;
  return std::max(1, kRopeThreads / per_row);
}
bool scatter_rows_vec_shape(int D, int ld, size_t es) {
  return (static_cast<size_t>(D) * es) % 16 == 0 && (static_cast<size_t>(ld) * es) % 16 == 0;
}

}  // namespace

const char* layer_norm_variant(int D, KernelPath path) {
  return path == KernelPath::Auto && layer_norm_vec8_shape(D) ? "layer_norm_vec8"
                                                              : "layer_norm_generic";
}
const char* gelu_variant(KernelPath path) {
  return path == KernelPath::Auto ? "gelu_vec8" : "gelu_generic";
}
const char* vision_pos_embed_add_variant(int W, KernelPath path) {
  return path == KernelPath::Auto && pos_embed_add_vec8_shape(W) ? "vision_pos_embed_add_vec8"
                                                                 : "vision_pos_embed_add_generic";
}
const char* vision_rope_split_variant(const VisionRopeArgs& a, KernelPath path) {
  if (a.kv_tiled && vision_rope_split_tiles_kv(a, path)) return "vision_rope_split_kv_tiles";
  if (path == KernelPath::Auto && rope_vec8_rows_per_block(a) > 0) return "vision_rope_split_vec8";
  return "vision_rope_split_generic";
}
bool vision_rope_split_tiles_kv(const VisionRopeArgs& a, KernelPath path) {
  return path == KernelPath::Auto && rope_tile_heads_per_block(a) > 0;
}
const char* scatter_rows_variant(int D, int ld, bool bf16, KernelPath path) {
  return path == KernelPath::Auto && scatter_rows_vec_shape(D, ld, bf16 ? 2 : 4)
             ? "scatter_rows_vec"
             : "scatter_rows_generic";
}

template <typename E>
void layer_norm(const E* x, const float* w, const float* b, E* out, int rows, int D, float eps,
                KernelPath path, cudaStream_t s) {
  if (rows <= 0) return;
  if (D <= 0) throw std::invalid_argument("layer_norm: row width must be positive");
  if (path == KernelPath::Auto && layer_norm_vec8_shape(D) && aligned16(x) && aligned16(w) &&
      aligned16(b) && aligned16(out)) {
    layer_norm_vec8_kernel<E>
        <<<(rows + kLnWarps - 1) / kLnWarps, 32 * kLnWarps, 0, s>>>(x, w, b, out, rows, D, eps);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  const int threads = std::min(1024, std::max(128, (D + kLnRegs - 1) / kLnRegs + 31) / 32 * 32);
  layer_norm_kernel<E><<<rows, threads, 0, s>>>(x, w, b, out, D, eps);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void gelu_inplace(E* x, size_t n, GeluKind kind, KernelPath path, cudaStream_t s) {
  if (n == 0) return;
  const bool vec = path == KernelPath::Auto && aligned16(x);
  const int blocks = grid_stride_blocks(vec ? std::max<size_t>(n / 8, 1) : n);
  if (kind == GeluKind::Tanh) {
    if (vec)
      gelu_vec8_kernel<E, GeluKind::Tanh><<<blocks, 256, 0, s>>>(x, n);
    else
      gelu_generic_kernel<E, GeluKind::Tanh><<<blocks, 256, 0, s>>>(x, n);
  } else {
    if (vec)
      gelu_vec8_kernel<E, GeluKind::Erf><<<blocks, 256, 0, s>>>(x, n);
    else
      gelu_generic_kernel<E, GeluKind::Erf><<<blocks, 256, 0, s>>>(x, n);
  }
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void vision_pos_embed_add(E* x, int row0, const E* table, int side, int t, int h, int w, int W,
                          KernelPath path, cudaStream_t s) {
  if (side < 1 || W < 1 || t < 1 || h < 2 || w < 2 || h % 2 != 0 || w % 2 != 0 || row0 < 0) {
    throw std::invalid_argument("vision_pos_embed_add: grid (" + std::to_string(t) + ", " +
                                std::to_string(h) + ", " + std::to_string(w) +
                                ") is not t >= 1 slices of an even h x w of patches (side " +
                                std::to_string(side) + ", width " + std::to_string(W) + ")");
  }
  const int64_t rows = static_cast<int64_t>(t) * h * w;
  if (rows > INT32_MAX) throw std::invalid_argument("vision_pos_embed_add: too many patches");
  // (row0 * W and the table are 16-byte aligned when W is a multiple of 8 and x, table are.)
  if (path == KernelPath::Auto && pos_embed_add_vec8_shape(W) && aligned16(x) && aligned16(table)) {
    const size_t chunks = static_cast<size_t>(rows) * (W / 8);
    pos_embed_add_vec8_kernel<E><<<static_cast<unsigned>((chunks + 255) / 256), 256, 0, s>>>(
        x, row0, table, side, h, w, W, chunks);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  pos_embed_add_kernel<E>
      <<<dim3(static_cast<unsigned>(rows), (W + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(
          x, row0, table, side, h, w, W);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void vision_rope_split(const E* qkv, E* q, E* k, E* v, const VisionRopeArgs& a, KernelPath path,
                       cudaStream_t s) {
  if (a.rows <= 0) return;
  if (a.heads < 1 || a.hd < 4 || a.hd % 4 != 0 || a.hdp < a.hd)
    throw std::invalid_argument("vision_rope_split: head dim " + std::to_string(a.hd) +
                                " (a positive multiple of 4 needed), padded " +
                                std::to_string(a.hdp) + ", heads " + std::to_string(a.heads));
  const int rpb = path == KernelPath::Auto ? rope_vec8_rows_per_block(a) : 0;
  const bool vec8 = rpb > 0 && aligned16(qkv) && aligned16(q) && aligned16(k) && aligned16(v);
  if (a.kv_tiled) {
    const int hpb = vision_rope_split_tiles_kv(a, path) ? rope_tile_heads_per_block(a) : 0;
    if (hpb == 0 || !aligned16(qkv) || !aligned16(q) || !aligned16(k) || !aligned16(v))
      throw std::invalid_argument(
          "vision_rope_split: no key-tiled kernel for this shape or path "
          "(vision_rope_split_tiles_kv), or buffers not 16-byte aligned");
    const dim3 grid(kv_tile_blocks(a.rows) * (kKvTileRows / 8), a.heads / hpb);
    vision_rope_split_tiles_kernel<E>
        <<<grid, 8 * hpb*(kv_tile_cols(a.hdp) / 8),
           static_cast<size_t>(8) * (a.hd + 1) * sizeof(float), s>>>(qkv, q, k, v, a, hpb);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  if (vec8) {
    const dim3 block(a.heads * (a.hdp / 8), rpb);
    vision_rope_split_vec8_kernel<E>
        <<<(a.rows + rpb - 1) / rpb, block, static_cast<size_t>(rpb) * a.hd * sizeof(float), s>>>(
            qkv, q, k, v, a);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  vision_rope_split_kernel<E>
      <<<a.rows, 256, static_cast<size_t>(a.hd) * sizeof(float), s>>>(qkv, q, k, v, a);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void scatter_rows(E* dst, int ld, const E* src, const int32_t* dst_rows, int n, int D,
                  KernelPath path, cudaStream_t s) {
  if (n <= 0 || D <= 0) return;
  if (ld < D) throw std::invalid_argument("scatter_rows: destination stride below the row width");
  const size_t row_bytes = static_cast<size_t>(D) * sizeof(E);
  const size_t ld_bytes = static_cast<size_t>(ld) * sizeof(E);
  if (path == KernelPath::Auto && scatter_rows_vec_shape(D, ld, sizeof(E)) && aligned16(dst) &&
      aligned16(src)) {
    const int words = static_cast<int>(row_bytes / 16);
    scatter_rows_vec_kernel<<<dim3(n, (words + kVecChunks - 1) / kVecChunks), kVecThreads, 0, s>>>(
        reinterpret_cast<uint4*>(dst), static_cast<int>(ld_bytes / 16),
        reinterpret_cast<const uint4*>(src), dst_rows, words);
  } else {
    scatter_rows_generic_kernel<E>
        <<<dim3(n, (D + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(dst, ld, src, dst_rows, D);
  }
  CLEF_CUDA_LAUNCH_CHECK();
}

std::vector<float> vision_rope_inv_freq(int head_dim, double theta) {
  const int half = head_dim / 2, quarter = head_dim / 4;
  std::vector<float> f(std::max(quarter, 0));
  for (int i = 0; i < quarter; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(half);
    f[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(expo)));
  }
  return f;
}

#define CLEF_INSTANTIATE(E)                                                                     \
  template void layer_norm<E>(const E*, const float*, const float*, E*, int, int, float,        \
                              KernelPath, cudaStream_t);                                        \
  template void gelu_inplace<E>(E*, size_t, GeluKind, KernelPath, cudaStream_t);                \
  template void vision_pos_embed_add<E>(E*, int, const E*, int, int, int, int, int, KernelPath, \
                                        cudaStream_t);                                          \
  template void vision_rope_split<E>(const E*, E*, E*, E*, const VisionRopeArgs&, KernelPath,   \
                                     cudaStream_t);                                             \
  template void scatter_rows<E>(E*, int, const E*, const int32_t*, int, int, KernelPath,        \
                                cudaStream_t);
CLEF_INSTANTIATE(float)
CLEF_INSTANTIATE(__nv_bfloat16)
#undef CLEF_INSTANTIATE

}  // namespace clef::engine::cuda

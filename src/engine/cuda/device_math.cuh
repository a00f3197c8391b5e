// Device helpers shared by the backbone kernels: storage-type conversion, rounding to the storage
// type (a no-op in fp32 mode), block/warp reductions and 16-byte vector access.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace clef::engine::cuda {

__device__ __forceinline__ float to_f(float x) {
  return x;
}
__device__ __forceinline__ float to_f(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename E>
__device__ __forceinline__ E from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// x rounded to the storage type E (where the bf16 reference materialises a bf16 tensor).
template <typename E>
__device__ __forceinline__ float rnd(float x) {
  return to_f(from_f<E>(x));
}

__device__ __forceinline__ float sigmoid_f(float x) {
  return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ float silu_f(float x) {
  return x / (1.0f + expf(-x));
}
// SiLU of a value whose result is rounded to E (the conv prep's, SwiGLU's and the gated norms'
// element loops). For bf16: ex2.approx and an approximate division (5 instructions instead of
// expf's range reduction and the IEEE division's ~19; relative error ~2^-20 for |x| < 16, against
// bf16's rounding step of 2^-8, so only values within that of a rounding tie can land one bf16 step
// apart). fp32 keeps silu_f: there the result is not rounded away. CLEF_SILU_EXACT builds the bf16
// form as silu_f (the A/B build of perf-log v18a).
template <typename E>
__device__ __forceinline__ float silu_rounded_to(float x) {
#ifndef CLEF_SILU_EXACT
  if constexpr (sizeof(E) == 2) return __fdividef(x, 1.0f + __expf(-x));
#endif
  return silu_f(x);
}
// The sigmoid in the same form, for the same reason (the attention output gate).
template <typename E>
__device__ __forceinline__ float sigmoid_rounded_to(float x) {
#ifndef CLEF_SILU_EXACT
  if constexpr (sizeof(E) == 2) return __fdividef(1.0f, 1.0f + __expf(-x));
#endif
  return sigmoid_f(x);
}
__device__ __forceinline__ float softplus_f(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024). `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < nw ? scratch[lane] : 0.0f;
  return warp_sum(r);
}

// Sum over a block that reduces only once (blockDim.x a multiple of 32, at most 1024): one
// __syncthreads instead of block_sum's two. `scratch` holds 32 floats. The order of the partial
// sums differs from block_sum's.
__device__ __forceinline__ float block_sum_once(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = 0.0f;
  for (int i = 0; i < nw; ++i) r += scratch[i];
  return r;
}

// Sum over aligned groups of `lanes` lanes (a power of two <= 32); every lane of the warp must
// call. Unrolled (the shuffles lanes / 2, ..., 1 in that order, no loop branch).
__device__ __forceinline__ float group_sum(float v, int lanes) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < lanes) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// 8 consecutive values of the storage type E moved with 16-byte accesses: one for bf16, two for
// float. Pointers must be 16-byte aligned. A value-initialised Vec8 holds eight +0.
template <typename E>
struct Vec8;
template <>
struct Vec8<__nv_bfloat16> {
  uint4 u;
};
template <>
struct Vec8<float> {
  float4 a, b;
};

template <typename E>
__device__ __forceinline__ Vec8<E> ld8(const E* p);
template <>
__device__ __forceinline__ Vec8<__nv_bfloat16> ld8(const __nv_bfloat16* p) {
  return {*reinterpret_cast<const uint4*>(p)};
}
template <>
__device__ __forceinline__ Vec8<float> ld8(const float* p) {
  const float4* q = reinterpret_cast<const float4*>(p);
  return {q[0], q[1]};
}

__device__ __forceinline__ void st8(__nv_bfloat16* p, const Vec8<__nv_bfloat16>& v) {
  *reinterpret_cast<uint4*>(p) = v.u;
}
__device__ __forceinline__ void st8(float* p, const Vec8<float>& v) {
  float4* q = reinterpret_cast<float4*>(p);
  q[0] = v.a;
  q[1] = v.b;
}

// Exact widening (the same values as to_f).
__device__ __forceinline__ void unpack8(const Vec8<__nv_bfloat16>& v, float (&f)[8]) {
  const unsigned w[4] = {v.u.x, v.u.y, v.u.z, v.u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f[2 * j] = __uint_as_float(w[j] << 16);
    f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack8(const Vec8<float>& v, float (&f)[8]) {
  f[0] = v.a.x, f[1] = v.a.y, f[2] = v.a.z, f[3] = v.a.w;
  f[4] = v.b.x, f[5] = v.b.y, f[6] = v.b.z, f[7] = v.b.w;
}

// Rounds each value to E exactly like from_f<E> (bf16: two per conversion, the same
// round-to-nearest-even as one by one).
template <typename E>
__device__ __forceinline__ Vec8<E> pack8(const float (&f)[8]);
template <>
__device__ __forceinline__ Vec8<__nv_bfloat16> pack8<__nv_bfloat16>(const float (&f)[8]) {
  unsigned w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    w[j] = *reinterpret_cast<const unsigned*>(&v);
  }
  return {make_uint4(w[0], w[1], w[2], w[3])};
}
template <>
__device__ __forceinline__ Vec8<float> pack8<float>(const float (&f)[8]) {
  return {make_float4(f[0], f[1], f[2], f[3]), make_float4(f[4], f[5], f[6], f[7])};
}

// f = the 8 values at p (16-byte aligned) widened to fp32.
template <typename E>
__device__ __forceinline__ void load8f(const E* p, float (&f)[8]) {
  unpack8(ld8(p), f);
}

}  // namespace clef::engine::cuda

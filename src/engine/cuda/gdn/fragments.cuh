// The GDN tensor-core kernels' fragment orders in global memory: how prep writes W for the scan's
// value warps (w_frag) and how the scan publishes the states and Vn for the output kernel
// (b_frag, acc_b_frag). Shared by gdn/tensor_core.cu and the workbench prototype of the scan's
// chain (dev/cuda/gdn_chain.cu), which must publish what the engine's output kernel reads.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/gdn/bf16_split.cuh"
#include "engine/cuda/mma_sync.cuh"

namespace clef::engine::cuda::gdn {

// The output kernel's B operands (the published states and Vn, rounded to bf16) in the order its
// warps read them: per k16 step kk, 16-column pair jp and lane, that lane's m16n8k16 B fragments
// {b0, b1} of n8 tiles 2 jp and 2 jp + 1 (one 16-byte load a lane, 512 contiguous bytes a warp).
// Index in uint4 units from a (value head, chunk slot)'s first fragment.
__device__ __forceinline__ size_t b_frag(int kk, int jp, int dv, int lane) {
  return (static_cast<size_t>(kk) * (dv / 16) + jp) * 32 + lane;
}

// This lane's b_frag entry of two n8 tiles (a, then b) of one k16 step whose m16n8 accumulators
// (k = the rows) the warp holds: rounded to bf16, each 8 x 8 half transposed across the warp.
__device__ __forceinline__ uint4 acc_b_frag(const float (&a)[4], const float (&b)[4]) {
  return make_uint4(movmatrix_trans(pack_bf16(a[0], a[1])), movmatrix_trans(pack_bf16(a[2], a[3])),
                    movmatrix_trans(pack_bf16(b[0], b[1])), movmatrix_trans(pack_bf16(b[2], b[3])));
}

// W of one (value head, chunk slot) in the order the scan's value warps read it: per 16-row tile
// tm, k16 step kg and lane, that lane's m16n8k16 A fragment (four bf16 pairs) of W's hi term, then
// of its lo term (gdn/bf16_split.cuh, W = hi + lo to ~2^-17): two 16-byte loads a step, coalesced.
// Index in uint4 units from the slot's first row of W (row0 * dk floats).
__device__ __forceinline__ size_t w_frag(int tm, int kg, int kgs, int lane) {
  return (static_cast<size_t>(tm * kgs + kg) * 32 + lane) * 2;
}

// Lane offset of ldmatrix_x4_trans over a [k][n] bf16 tile (row stride ld) giving the B fragments
// of n8 tiles 2 np and 2 np + 1 at k16 step k0: {b0, b1} of the first, then of the second.
__device__ __forceinline__ int b_pair_offset(int k0, int np, int ld, int lane) {
  return (k0 + lane % 8 + 8 * ((lane / 8) % 2)) * ld + 16 * np + 8 * (lane / 16);
}

// The m16n8k16 A fragment of (L diag(f)) at one k16 step in three bf16 terms a[0..2] (fp32
// accuracy): l = L + (16 tm + lane / 4) ld + 16 kk + 2 (lane % 4), f = f + 16 kk + 2 (lane % 4)
// (L fp32, row stride ld; f the column factors): prep's W and U products (tensor_core.cu
// lower_times; perf-log v36 formed them in the scan's CTA this way: refuted, removed).
__device__ __forceinline__ void lower_a_terms(const float* l, int ld, const float* f,
                                              uint32_t (&a)[3][4]) {
  const float2 f0 = *reinterpret_cast<const float2*>(f);
  const float2 f1 = *reinterpret_cast<const float2*>(f + 8);
  const float2 x0 = *reinterpret_cast<const float2*>(l);
  const float2 x1 = *reinterpret_cast<const float2*>(l + 8 * ld);
  const float2 x2 = *reinterpret_cast<const float2*>(l + 8);
  const float2 x3 = *reinterpret_cast<const float2*>(l + 8 * ld + 8);
  uint32_t p0[3], p1[3], p2[3], p3[3];
  split_pair(x0.x * f0.x, x0.y * f0.y, p0);
  split_pair(x1.x * f0.x, x1.y * f0.y, p1);
  split_pair(x2.x * f1.x, x2.y * f1.y, p2);
  split_pair(x3.x * f1.x, x3.y * f1.y, p3);
#pragma unroll
  for (int p = 0; p < 3; ++p) a[p][0] = p0[p], a[p][1] = p1[p], a[p][2] = p2[p], a[p][3] = p3[p];
}
// acc0 / acc1 (n8 tiles 2 np, 2 np + 1) += the three terms of a times b (ldmatrix_x4_trans at
// b_pair_offset), term by term.
__device__ __forceinline__ void mma_terms(float (&acc0)[4], float (&acc1)[4],
                                          const uint32_t (&a)[3][4], const uint32_t (&b)[4]) {
#pragma unroll
  for (int p = 0; p < 3; ++p) {
    mma_bf16(acc0, a[p], b[0], b[1]);
    mma_bf16(acc1, a[p], b[2], b[3]);
  }
}

// Xk^T's m16n8k16 A fragment for the state update S += Xk^T (F Vn): key dims 16 mt .. + 15 (the
// state's rows) at chunk rows 16 kg .. + 15, by ldmatrix.trans of a chunk's keys in shared memory
// ([C][ld] bf16, rows = chunk rows). (dev/cuda/gdn_chain.cu's xk_t_frags forms the same address
// in another order, which its measured register allocation depends on.)
__device__ __forceinline__ void xk_t_frag(uint32_t (&a)[4], const __nv_bfloat16* xk, int ld, int kg,
                                          int mt, int lane) {
  ldmatrix_x4_trans(
      a, xk + (16 * kg + lane % 8 + 8 * (lane / 16)) * ld + 16 * mt + 8 * ((lane / 8) % 2));
}

}  // namespace clef::engine::cuda::gdn

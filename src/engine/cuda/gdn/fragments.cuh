// The GDN tensor-core kernels' fragment orders in global memory: how prep writes W for the scan's
// value warps (w_frag) and how the scan publishes the states and Vn for the output kernel
// (b_frag, acc_b_frag). Shared by gdn/tensor_core.cu and the workbench prototype of the scan's
// chain (dev/cuda/gdn_chain.cu), which must publish what the engine's output kernel reads.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

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

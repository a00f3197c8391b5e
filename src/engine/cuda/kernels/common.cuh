// Constants and helpers shared by the backbone kernel families (norm.cu, gdn_prep.cu, attn_prep.cu,
// elementwise.cu). Every family has two variants per op: a generic one (scalar loads, any width,
// stride and alignment) and a vec8 one (16-byte loads/stores of 8 elements, sub-warp per head with
// shuffle reductions, several rows per block) that the host wrapper takes when the path is
// KernelPath::Auto, the pointers are 16-byte aligned and the widths/strides are multiples of 8
// elements. Both variants compute the same fp32 expressions with the same rounding points; only the
// order of the partial sums of squares inside a reduction differs. Included by .cu files only.
#pragma once

#include <cstdint>

#include "engine/cuda/device_math.cuh"

namespace clef::engine::cuda {
namespace {

constexpr int kMaxPerThread = 4;  // head dims up to 4 * blockDim (512 with 128 threads)
// Row-sliced element-wise kernels: grid (rows, columns / kSlice), 8 independent elements per thread
// so that every load of a thread is in flight at once (one block per row walking the row was
// latency-bound).
constexpr int kSliceThreads = 256, kSlice = 8 * kSliceThreads;

// vec8 variants. Streaming kernels: 256 threads, kVecPerThread 16-byte chunks (8 elements) per
// thread and operand, all loads issued before any use.
constexpr int kVecThreads = 256, kVecPerThread = 2, kVecChunks = kVecPerThread * kVecThreads;

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

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace
}  // namespace clef::engine::cuda

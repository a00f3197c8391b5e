// fp32 operands on bf16 tensor cores for the chunked GDN kernels: x = x_1 + x_2 (+ x_3), each term
// the bf16 rounding of what the previous terms left (every residual is exact in fp32). Products of
// bf16 values are exact in fp32, so a product with one operand split into P terms and the other
// exactly bf16 (the conv outputs, gdn.h GdnInputs) errs by the split's residual only: about 2^-17
// relative for two terms, 2^-25 (fp32's own rounding) for three.
#pragma once

#include <cstdint>

#include "engine/cuda/mma_sync.cuh"

namespace clef::engine::cuda::gdn {

// The two values of a packed bf16 pair, widened exactly.
__device__ __forceinline__ float bf16_lo(uint32_t p) {
  return __uint_as_float(p << 16);
}
__device__ __forceinline__ float bf16_hi(uint32_t p) {
  return __uint_as_float(p & 0xffff0000u);
}

// (x0, x1) as P packed pairs, x = sum of the terms (x0 in the low halves).
template <int P>
__device__ __forceinline__ void split_pair(float x0, float x1, uint32_t (&out)[P]) {
#pragma unroll
  for (int i = 0; i < P; ++i) {
    out[i] = pack_bf16(x0, x1);
    if (i + 1 < P) x0 -= bf16_lo(out[i]), x1 -= bf16_hi(out[i]);
  }
}

}  // namespace clef::engine::cuda::gdn

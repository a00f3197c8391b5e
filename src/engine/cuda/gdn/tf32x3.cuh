// 3xTF32 matrix products on the tensor cores: x = hi + lo with both halves TF32 and
// a b ~= a_hi b_hi + a_hi b_lo + a_lo b_hi, which keeps products at about fp32 accuracy (plain TF32
// made the bf16 engine noisier than the reference's bf16 run, whose GDN core is fp32), on raw
// mma.sync m16n8k8 with the documented register layout (operands are split once and reused).
#pragma once

#include <cstdint>

namespace clef::engine::cuda::tf32x3 {

// m16n8k8 (PTX ISA "Matrix Fragments for mma.m16n8k8", .tf32), g = lane / 4, t = lane % 4:
//   A (16x8):  a0 (g, t)  a1 (g+8, t)  a2 (g, t+4)  a3 (g+8, t+4)
//   B (8x8):   b0 (t, g)  b1 (t+4, g)
//   C (16x8):  c0 (g, 2t) c1 (g, 2t+1) c2 (g+8, 2t) c3 (g+8, 2t+1)
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mma_m16n8k8(float (&c)[4], const uint32_t (&a)[4],
                                            const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int N>
__device__ __forceinline__ void split(const float (&x)[N], uint32_t (&hi)[N], uint32_t (&lo)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    hi[i] = to_tf32(x[i]);
    lo[i] = to_tf32(x[i] - __uint_as_float(hi[i]));
  }
}

// 3xTF32 on split operands: hh += a_hi b_hi, lh += a_lo b_hi, hl += a_hi b_lo (three independent
// accumulators; the caller sums them once at the end). hl may alias lh at the cost of a longer
// dependent chain.
__device__ __forceinline__ void mma3(float (&hh)[4], float (&lh)[4], float (&hl)[4],
                                     const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                     const uint32_t (&bh)[2], const uint32_t (&bl)[2]) {
  mma_m16n8k8(lh, al, bh);
  mma_m16n8k8(hh, ah, bh);
  mma_m16n8k8(hl, ah, bl);
}

}  // namespace clef::engine::cuda::tf32x3

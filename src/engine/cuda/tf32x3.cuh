// 3xTF32 matrix products on the tensor cores: x = hi + lo with both halves TF32 and
// a b ~= a_hi b_hi + a_hi b_lo + a_lo b_hi, which keeps products at about fp32 accuracy (plain TF32
// made the bf16 engine noisier than the reference's bf16 run, whose GDN core is fp32). Two forms:
// wmma fragments (opaque layout, tiles in shared memory) and raw mma.sync m16n8k8 with the
// documented register layout (for operands that live in registers across a loop).
#pragma once

#include <mma.h>

#include <cstdint>

namespace clef::engine::cuda::tf32x3 {

namespace wm = nvcuda::wmma;
using FragA = wm::fragment<wm::matrix_a, 16, 16, 8, wm::precision::tf32, wm::row_major>;
using FragAc = wm::fragment<wm::matrix_a, 16, 16, 8, wm::precision::tf32, wm::col_major>;
using FragB = wm::fragment<wm::matrix_b, 16, 16, 8, wm::precision::tf32, wm::row_major>;
using FragBc = wm::fragment<wm::matrix_b, 16, 16, 8, wm::precision::tf32, wm::col_major>;
using FragC = wm::fragment<wm::accumulator, 16, 16, 8, float>;

template <typename F>
__device__ __forceinline__ void split(F& hi, F& lo) {
#pragma unroll
  for (int t = 0; t < hi.num_elements; ++t) {
    const float x = hi.x[t];
    hi.x[t] = wm::__float_to_tf32(x);
    lo.x[t] = wm::__float_to_tf32(x - hi.x[t]);
  }
}

template <typename FA, typename FB>
__device__ __forceinline__ void mma(FragC& acc, FA& a, FB& b) {
  FA alo;
  FB blo;
  split(a, alo);
  split(b, blo);
  wm::mma_sync(acc, alo, b, acc);
  wm::mma_sync(acc, a, blo, acc);
  wm::mma_sync(acc, a, b, acc);
}

// acc += A[16 x K] B[K x 16] from shared memory; A row-major (lda), B row-major (ldb) or, with BT,
// B[k][n] at b[n * ldb + k]. K % 8 == 0.
template <bool BT>
__device__ __forceinline__ void mma_rows(FragC& acc, const float* a, int lda, const float* b,
                                         int ldb, int K) {
  for (int kk = 0; kk < K; kk += 8) {
    FragA fa;
    wm::load_matrix_sync(fa, a + kk, lda);
    if constexpr (BT) {
      FragBc fb;
      wm::load_matrix_sync(fb, b + kk, ldb);
      mma(acc, fa, fb);
    } else {
      FragB fb;
      wm::load_matrix_sync(fb, b + static_cast<size_t>(kk) * ldb, ldb);
      mma(acc, fa, fb);
    }
  }
}

// ---- raw m16n8k8 (PTX ISA "Matrix Fragments for mma.m16n8k8", .tf32), g = lane / 4, t = lane % 4:
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
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// c += a b, 3xTF32, operands as fp32 values in the layout above.
__device__ __forceinline__ void mma3(float (&c)[4], const float (&a)[4], const float (&b)[2]) {
  uint32_t ah[4], al[4], bh[2], bl[2];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    ah[i] = to_tf32(a[i]);
    al[i] = to_tf32(a[i] - __uint_as_float(ah[i]));
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    bh[i] = to_tf32(b[i]);
    bl[i] = to_tf32(b[i] - __uint_as_float(bh[i]));
  }
  mma_m16n8k8(c, al, bh);
  mma_m16n8k8(c, ah, bl);
  mma_m16n8k8(c, ah, bh);
}

}  // namespace clef::engine::cuda::tf32x3

// Workbench prototype (issue 14, perf-log v32a): the packed GDN scan's recurrence on warpgroup
// MMAs (wgmma), to measure what one 64-token step of the chain costs there before any engine code
// depends on it. The engine's scan (gdn/tensor_core.cu, scan_kernel) runs the same recurrence on
// mma.sync at ~3.7 us a step (perf-log v25b), and a C16 pack's GDN core is mostly bound by its
// longest request's chain (5538 tokens: 87 steps, ~320 us a layer).
//
// Per (value head h, sequence, N value columns), chunks c = 0, 1, ... of 64 rows, S_0 = 0:
//   Vn_c = U_c - W_c S_c,   S_{c+1} = gC_c S_c + Xk_c^T diag(F_c) Vn_c
// (S: [128 key dims][N] fp32; W_c: [64][128], given as bf16 hi + lo terms in the scan's A-fragment
// order (w_frag); U_c [64][N] fp32; Xk_c [64][128] bf16; F_c [64]; gC_c a scalar), and the kernel
// publishes Vn_c (bf16) and S_c's hi term (bf16), as the engine's scan does for its output kernel.
// One CTA, two warpgroups: the value warpgroup forms Vn = U - W S with RS wgmmas (A = W from
// registers, B = S from shared memory, MN-major), the state warpgroup keeps S as two m64 fp32
// accumulator tiles and adds Xk^T (F Vn) with RS wgmmas (A = Xk^T by ldmatrix.trans, B = F Vn
// MN-major). The two hand S and F Vn over in shared memory as bf16 terms (gdn/bf16_split.cuh),
// behind named barriers; each loads its next chunk's operands by cp.async while the other works.
// Products: two-term (the engine's numerics: W hi S hi + W lo S hi + W hi S lo, Xk (F Vn hi + lo))
// or one-term (FlashInfer's: W hi S hi, Xk (F Vn hi)).
// Checked against a double-precision recurrence on the host (the final state and every Vn), then
// timed: packs of 7 x 16 chunks (a 7 x 1000 pack's waves) and one sequence of 87 chunks (the
// chain alone), at 64 and 32 columns a CTA.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "common.h"
#include "engine/cuda/attention/wgmma_ops.cuh"
#include "engine/cuda/gdn/bf16_split.cuh"
#include "engine/cuda/gdn/fragments.cuh"
#include "engine/cuda/hopper_async.cuh"
#include "engine/cuda/mma_sync.cuh"

namespace {
using namespace clef::engine::cuda;
using namespace clef::dev;
using bf16 = __nv_bfloat16;
constexpr int C = 64, DK = 128;
constexpr int kLdx = DK + 8;  // Xk rows in shared memory (conflict-free ldmatrix)

// Shared memory of an N-column CTA (bytes from the dynamic base).
template <int N>
struct Smem {
  static constexpr int kW = 0;                             // uint4 [2][4 warps][8 kg][32][2 terms]
  static constexpr int kU = kW + 2 * 4 * 8 * 32 * 2 * 16;  // float2 [2][128][N / 8][2]
  static constexpr int kF = kU + 2 * 128 * (N / 8) * 2 * 8;  // float [2][128][2]
  static constexpr int kS = kF + 2 * 128 * 2 * 4;            // bf16 [2 terms][DK x N] canonical
  static constexpr int kV = kS + 2 * DK * N * 2;             // bf16 [2 terms][C x N] canonical
  static constexpr int kX = kV + 2 * C * N * 2;              // bf16 [2][C][kLdx]
  static constexpr int kBytes = kX + 2 * C * kLdx * 2;
};

#ifdef CLEF_WGMMA_AVAILABLE
using namespace hopper;

// Element (r, c) of an R x NC bf16 tile in the no-swizzle canonical layout (8 x 8 core matrices,
// attention/flash_wgmma.cu): read MN-major with LBO 16 NC bytes (8 rows down) and SBO 128 bytes.
__device__ __forceinline__ constexpr int canon(int r, int c, int NC) {
  return ((r >> 3) * (NC >> 3) + (c >> 3)) * 64 + (r & 7) * 8 + (c & 7);
}

using namespace gdn;

__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
// This lane's b_frag entry from this warp's m16 accumulator rows (n8 tiles 2 jp, 2 jp + 1).
template <int M>
__device__ __forceinline__ uint4 pair_frag(const float (&a)[M], int jp) {
  return acc_b_frag(*reinterpret_cast<const float(*)[4]>(a + 8 * jp),
                    *reinterpret_cast<const float(*)[4]>(a + 8 * jp + 4));
}
template <int N>
__device__ __forceinline__ void rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, int sc) {
  if constexpr (N == 64)
    wgmma::rs_m64n64k16(d, a, b, sc);
  else
    wgmma::rs_m64n32k16(d, a, b, sc);
}
// ---- the chain's steps, shared by both kernels (N columns a chain; warp w of its warpgroup) ----
// W's two-term A fragments of this warp's chunk rows (w_frag order: a uint4 pair a k16 step).
__device__ __forceinline__ void w_frags(const uint4* wsrc, int lane, uint32_t (&wh)[8][4],
                                        uint32_t (&wl)[8][4]) {
#pragma unroll
  for (int kg = 0; kg < 8; ++kg) {
    const uint4 hi = wsrc[(kg * 32 + lane) * 2], lo = wsrc[(kg * 32 + lane) * 2 + 1];
    wh[kg][0] = hi.x, wh[kg][1] = hi.y, wh[kg][2] = hi.z, wh[kg][3] = hi.w;
    wl[kg][0] = lo.x, wl[kg][1] = lo.y, wl[kg][2] = lo.z, wl[kg][3] = lo.w;
  }
}
// S's terms (two m64 tiles: key dims 64 mt + 16 w + g (+8)) into Sh / Sl, canonical [DK][N].
template <int N, bool kOne>
__device__ __forceinline__ void state_terms(const float (&s)[2][N / 2], bf16* Sh, bf16* Sl, int w,
                                            int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = 64 * mt + 16 * w + g + 8 * hr, col = 8 * j + 2 * t;
        uint32_t p[2];
        split_pair<2>(s[mt][4 * j + 2 * hr], s[mt][4 * j + 2 * hr + 1], p);
        *reinterpret_cast<uint32_t*>(Sh + canon(r, col, N)) = p[0];
        if constexpr (!kOne) *reinterpret_cast<uint32_t*>(Sl + canon(r, col, N)) = p[1];
      }
}
// acc = W S (hi x hi, then unless kOne lo x hi and hi x lo), zeroed first, as one commit group.
template <int N, bool kOne>
__device__ __forceinline__ void issue_ws(float (&acc)[N / 2], const uint32_t (&wh)[8][4],
                                         const uint32_t (&wl)[8][4], const bf16* Sh,
                                         const bf16* Sl) {
  constexpr uint32_t kLbo = 16 * N, kSbo = 128;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.f;
  wgmma_fence();
#pragma unroll
  for (int kg = 0; kg < 8; ++kg) rs<N>(acc, wh[kg], smem_desc(Sh + kg * 16 * N, kLbo, kSbo), 1);
  if constexpr (!kOne) {
#pragma unroll
    for (int kg = 0; kg < 8; ++kg) rs<N>(acc, wl[kg], smem_desc(Sh + kg * 16 * N, kLbo, kSbo), 1);
#pragma unroll
    for (int kg = 0; kg < 8; ++kg) rs<N>(acc, wh[kg], smem_desc(Sl + kg * 16 * N, kLbo, kSbo), 1);
  }
  wgmma_commit();
}
// acc (= W S) becomes Vn = U - W S; diag(F) Vn's terms into Vh / Vl, canonical [C][N]. u: this
// thread's U pairs, element (j, hr) at u[(2 j + hr) stride]; f: F of rows 16 w + g and + 8.
template <int N, bool kOne>
__device__ __forceinline__ void vn_terms(float (&acc)[N / 2], const float2* u, int stride,
                                         const float (&f)[2], bf16* Vh, bf16* Vl, int w, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = 16 * w + g + 8 * hr, col = 8 * j + 2 * t;
      const float2 uu = u[(2 * j + hr) * stride];
      acc[4 * j + 2 * hr] = uu.x - acc[4 * j + 2 * hr];
      acc[4 * j + 2 * hr + 1] = uu.y - acc[4 * j + 2 * hr + 1];
      uint32_t p[2];
      split_pair<2>(f[hr] * acc[4 * j + 2 * hr], f[hr] * acc[4 * j + 2 * hr + 1], p);
      *reinterpret_cast<uint32_t*>(Vh + canon(r, col, N)) = p[0];
      if constexpr (!kOne) *reinterpret_cast<uint32_t*>(Vl + canon(r, col, N)) = p[1];
    }
}
// A = Xk^T (key dims 64 mt + 16 w .., chunk rows 16 kk ..) by ldmatrix.trans of the chunk's keys.
__device__ __forceinline__ void xk_t_frags(uint32_t (&xa)[2][4][4], const bf16* xs, int w,
                                           int lane) {
  const int q = lane / 8;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      ldmatrix_x4_trans(xa[mt][kk], xs + (16 * kk + 8 * (q / 2) + lane % 8) * kLdx + 64 * mt +
                                        16 * w + 8 * (q % 2));
}
// S *= gC, pinned ahead of the next fence (ptxas otherwise moves tile 1's scaling after tile 0's
// first wgmma and injects a wait there).
template <int N>
__device__ __forceinline__ void scale_state(float (&s)[2][N / 2], float gc) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) s[mt][i] *= gc;
  fence_regs(s[0]);
  fence_regs(s[1]);
}
// S += Xk^T (F Vn) (its hi term, then unless kOne its lo term), as one commit group.
template <int N, bool kOne>
__device__ __forceinline__ void issue_update(float (&s)[2][N / 2], const uint32_t (&xa)[2][4][4],
                                             const bf16* Vh, const bf16* Vl) {
  constexpr uint32_t kLbo = 16 * N, kSbo = 128;
  wgmma_fence();
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      rs<N>(s[mt], xa[mt][kk], smem_desc(Vh + kk * 16 * N, kLbo, kSbo), 1);
      if constexpr (!kOne) rs<N>(s[mt], xa[mt][kk], smem_desc(Vl + kk * 16 * N, kLbo, kSbo), 1);
    }
  wgmma_commit();
}
// S's hi term (hp, k16 steps 4 mt + w) and Vn (vp, k16 step w) in b_frag order, columns c0 ...
template <int N>
__device__ __forceinline__ void publish_state(const float (&s)[2][N / 2], uint4* hp, int w, int c0,
                                              int dv, int lane) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int jp = 0; jp < N / 16; ++jp)
      hp[b_frag(4 * mt + w, c0 / 16 + jp, dv, lane)] = pair_frag(s[mt], jp);
}
template <int N>
__device__ __forceinline__ void publish_vn(const float (&acc)[N / 2], uint4* vp, int w, int c0,
                                           int dv, int lane) {
#pragma unroll
  for (int jp = 0; jp < N / 16; ++jp) vp[b_frag(w, c0 / 16 + jp, dv, lane)] = pair_frag(acc, jp);
}
// The final state, fp32, into sf [DK][dv] at columns c0 ...
template <int N>
__device__ __forceinline__ void store_final(const float (&s)[2][N / 2], float* sf, int w, int c0,
                                            int dv, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = 64 * mt + 16 * w + g + 8 * hr, col = 8 * j + 2 * t;
        *reinterpret_cast<float2*>(sf + r * dv + c0 + col) =
            make_float2(s[mt][4 * j + 2 * hr], s[mt][4 * j + 2 * hr + 1]);
      }
}
#endif

// Grid (dv / N, Hv, sequences), 256 threads; every sequence nC chunks (rows seq nC C ..).
template <int N, bool kOne>
__global__ void __launch_bounds__(256, 1)
    chain_kernel(const uint4* __restrict__ Wf, const float* __restrict__ U,
                 const float* __restrict__ F, const float* __restrict__ gC,
                 const bf16* __restrict__ Xk, int Hk, int Hv, int nC, int dv, bool publish,
                 uint4* __restrict__ Hpub, uint4* __restrict__ Vn, float* __restrict__ Sfin) {
#ifdef CLEF_WGMMA_AVAILABLE
  using SM = Smem<N>;
  extern __shared__ __align__(128) unsigned char smem[];
  uint4* Wb = reinterpret_cast<uint4*>(smem + SM::kW);
  float2* Ub = reinterpret_cast<float2*>(smem + SM::kU);
  float* Fb = reinterpret_cast<float*>(smem + SM::kF);
  bf16* Sh = reinterpret_cast<bf16*>(smem + SM::kS);
  bf16* Sl = Sh + DK * N;
  bf16* Vh = reinterpret_cast<bf16*>(smem + SM::kV);
  bf16* Vl = Vh + C * N;
  bf16* Xs = reinterpret_cast<bf16*>(smem + SM::kX);
  const int h = blockIdx.y, c0 = blockIdx.x * N, seq = blockIdx.z, n_seq = gridDim.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const size_t Tc = static_cast<size_t>(n_seq) * nC * C;  // rows a head
  const int row0 = seq * nC * C;                          // the sequence's first row
  const size_t slot0 = static_cast<size_t>(h) * n_seq * nC + static_cast<size_t>(seq) * nC;
  constexpr int NJ = N / 8;  // n8 tiles of an accumulator row
  if (warp < 4) {
    // ---- value warpgroup: Vn = U - W S; warp w owns chunk rows 16 w .. + 15
    const int vt = threadIdx.x;
    auto load = [&](int c) {
      const int b = c & 1;
      const uint4* src = Wf + ((slot0 + c) * 4 * 8 + warp * 8) * 32 * 2;
      uint4* dst = Wb + ((b * 4 + warp) * 8) * 32 * 2;
#pragma unroll
      for (int kg = 0; kg < 8; ++kg)
#pragma unroll
        for (int term = 0; term < 2; ++term)
          cp_async16(dst + (kg * 32 + lane) * 2 + term, src + (kg * 32 + lane) * 2 + term, 16);
      const size_t r = static_cast<size_t>(h) * Tc + row0 + c * C + 16 * warp + g;
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
          cp_async8(Ub + ((b * NJ + j) * 2 + hr) * 128 + vt,
                    U + (r + 8 * hr) * dv + c0 + 8 * j + 2 * t);
      cp_async4(Fb + (b * 128 + vt) * 2, F + r);
      cp_async4(Fb + (b * 128 + vt) * 2 + 1, F + r + 8);
      cp_async_commit();
    };
    load(0);
    for (int c = 0; c < nC; ++c) {
      const int b = c & 1;
      cp_async_wait<0>();  // this thread's own operands of chunk c (no other thread reads them)
      if (c + 1 < nC) load(c + 1);
      uint32_t wh[8][4], wl[8][4];
      w_frags(Wb + ((b * 4 + warp) * 8) * 32 * 2, lane, wh, wl);
      bar_sync(1, 256);  // S_c's terms are in Sh / Sl
      float acc[N / 2];
      issue_ws<N, kOne>(acc, wh, wl, Sh, Sl);
      wgmma_wait<0>();
      fence_regs(acc);
      const float f[2] = {Fb[(b * 128 + vt) * 2], Fb[(b * 128 + vt) * 2 + 1]};
      vn_terms<N, kOne>(acc, Ub + b * NJ * 2 * 128 + vt, 128, f, Vh, Vl, warp, lane);  // acc: Vn
      fence_proxy_async();  // the F Vn terms visible to the state warpgroup's wgmmas
      bar_arrive(2, 256);
      // Vn in the output kernel's B-fragment order (b_frag: one 16-byte store a lane, k16 step =
      // this warp's rows), off the chain: the state warpgroup's update runs meanwhile.
      if (publish) publish_vn<N>(acc, Vn + (slot0 + c) * (C * dv / 8), warp, c0, dv, lane);
    }
  } else {
    // ---- state warpgroup: S in two m64 tiles (key dims 64 mt + 16 wq + g (+8)), N columns
    const int wq = warp - 4, st = threadIdx.x - 128;
    float s[2][N / 2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int i = 0; i < N / 2; ++i) s[mt][i] = 0.f;
    const int kh = h / (Hv / Hk);
    auto loadx = [&](int c) {
      bf16* dst = Xs + (c & 1) * C * kLdx;
      const bf16* src = Xk + (static_cast<size_t>(row0 + c * C) * Hk + kh) * DK;
      for (int e = st; e < C * DK / 8; e += 128) {
        const int i = e / (DK / 8), cc = (e % (DK / 8)) * 8;
        cp_async16(dst + i * kLdx + cc, src + static_cast<size_t>(i) * Hk * DK + cc, 16);
      }
      cp_async_commit();
    };
    loadx(0);
    float gnext = __ldg(gC + slot0);
    for (int c = 0; c < nC; ++c) {
      state_terms<N, kOne>(s, Sh, Sl, wq, lane);  // S_c into the shared terms
      fence_proxy_async();
      bar_arrive(1, 256);
      // S_c's hi term in b_frag order, while the value warpgroup runs
      if (publish) publish_state<N>(s, Hpub + (slot0 + c) * (DK * dv / 8), wq, c0, dv, lane);
      const float gc = gnext;
      if (c + 1 < nC) gnext = __ldg(gC + slot0 + c + 1);
      cp_async_wait<0>();
      bar_sync(3, 128);  // Xk_c visible to the warpgroup; every read of the other buffer done
      if (c + 1 < nC) loadx(c + 1);
      uint32_t xa[2][4][4];
      xk_t_frags(xa, Xs + (c & 1) * C * kLdx, wq, lane);
      bar_sync(2, 256);  // F Vn_c's terms are in Vh / Vl
      scale_state<N>(s, gc);
      issue_update<N, kOne>(s, xa, Vh, Vl);
      wgmma_wait<0>();
      fence_regs(s[0]);
      fence_regs(s[1]);
    }
    store_final<N>(s, Sfin + (static_cast<size_t>(h) * n_seq + seq) * DK * dv, wq, c0, dv, lane);
  }
#else
  __trap();  // sm_90a only
#endif
}

// The same recurrence with each warpgroup a whole chain of its own 32 columns (a CTA: 64 columns,
// two independent chains): the warpgroup forms Vn = U - W S (24 / 8 m64n32k16), hands F Vn to
// itself through shared memory and adds Xk^T (F Vn) to S (16 / 8), so no warpgroup waits for the
// other and the tensor pipe has two chains to interleave. W, Xk (shared by the two chains) and
// each thread's U and F rows come by cp.async a chunk ahead, behind one CTA barrier a chunk.
struct SoloSmem {
  static constexpr int kW = 0;                             // uint4 [2][4 warps][8 kg][32][2 terms]
  static constexpr int kX = kW + 2 * 4 * 8 * 32 * 2 * 16;  // bf16 [2][C][kLdx]
  static constexpr int kU = kX + 2 * C * kLdx * 2;         // float2 [2][4 j][2 hr][256]
  static constexpr int kF = kU + 2 * 4 * 2 * 256 * 8;      // float [2][2][256]
  static constexpr int kS = kF + 2 * 2 * 256 * 4;          // bf16 [2 wg][2 terms][DK x 32]
  static constexpr int kV = kS + 2 * 2 * DK * 32 * 2;      // bf16 [2 wg][2 terms][C x 32]
  static constexpr int kBytes = kV + 2 * 2 * C * 32 * 2;
};

template <bool kOne>
__global__ void __launch_bounds__(256, 1)
    solo_kernel(const uint4* __restrict__ Wf, const float* __restrict__ U,
                const float* __restrict__ F, const float* __restrict__ gC,
                const bf16* __restrict__ Xk, int Hk, int Hv, int nC, int dv, bool publish,
                uint4* __restrict__ Hpub, uint4* __restrict__ Vn, float* __restrict__ Sfin) {
#ifdef CLEF_WGMMA_AVAILABLE
  using SM = SoloSmem;
  constexpr int N = 32, NJ = 4;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wg = warp / 4, w = warp % 4, tid = threadIdx.x;
  uint4* Wb = reinterpret_cast<uint4*>(smem + SM::kW);
  bf16* Xs = reinterpret_cast<bf16*>(smem + SM::kX);
  float2* Ub = reinterpret_cast<float2*>(smem + SM::kU);
  float* Fb = reinterpret_cast<float*>(smem + SM::kF);
  bf16* Sh = reinterpret_cast<bf16*>(smem + SM::kS) + wg * 2 * DK * N;
  bf16* Sl = Sh + DK * N;
  bf16* Vh = reinterpret_cast<bf16*>(smem + SM::kV) + wg * 2 * C * N;
  bf16* Vl = Vh + C * N;
  const int h = blockIdx.y, c0 = blockIdx.x * 64 + 32 * wg, seq = blockIdx.z, n_seq = gridDim.z;
  const size_t Tc = static_cast<size_t>(n_seq) * nC * C;
  const int row0 = seq * nC * C, kh = h / (Hv / Hk);
  const size_t slot0 = static_cast<size_t>(h) * n_seq * nC + static_cast<size_t>(seq) * nC;
  const int bar = 1 + wg;   // this warpgroup's named barrier
  auto load = [&](int c) {  // chunk c's operands into buffer c % 2, one cp.async group
    const int b = c & 1;
    const uint4* wsrc = Wf + (slot0 + c) * 4 * 8 * 32 * 2;
    for (int e = tid; e < 4 * 8 * 32 * 2; e += 256) cp_async16(Wb + b * 2048 + e, wsrc + e, 16);
    const bf16* xsrc = Xk + (static_cast<size_t>(row0 + c * C) * Hk + kh) * DK;
    for (int e = tid; e < C * DK / 8; e += 256) {
      const int i = e / (DK / 8), cc = (e % (DK / 8)) * 8;
      cp_async16(Xs + b * C * kLdx + i * kLdx + cc, xsrc + static_cast<size_t>(i) * Hk * DK + cc,
                 16);
    }
    const size_t r = static_cast<size_t>(h) * Tc + row0 + c * C + 16 * w + g;
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
        cp_async8(Ub + ((b * NJ + j) * 2 + hr) * 256 + tid,
                  U + (r + 8 * hr) * dv + c0 + 8 * j + 2 * t);
    cp_async4(Fb + (b * 2) * 256 + tid, F + r);
    cp_async4(Fb + (b * 2 + 1) * 256 + tid, F + r + 8);
    cp_async_commit();
  };
  float s[2][N / 2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) s[mt][i] = 0.f;
  load(0);
  float gnext = __ldg(gC + slot0);
  for (int c = 0; c < nC; ++c) {
    const int b = c & 1;
    cp_async_wait<0>();
    __syncthreads();  // chunk c's W and Xk visible to all; every read of buffer 1 - b done
    if (c + 1 < nC) load(c + 1);
    const float gc = gnext;
    if (c + 1 < nC) gnext = __ldg(gC + slot0 + c + 1);
    state_terms<N, kOne>(s, Sh, Sl, w, lane);  // S_c into this warpgroup's shared terms
    uint32_t wh[8][4], wl[8][4];
    w_frags(Wb + b * 2048 + w * 8 * 32 * 2, lane, wh, wl);
    fence_proxy_async();
    bar_sync(bar, 128);
    float acc[N / 2];
    issue_ws<N, kOne>(acc, wh, wl, Sh, Sl);
    // S_c's hi term (b_frag) and the next A fragments while the products run
    if (publish) publish_state<N>(s, Hpub + (slot0 + c) * (DK * dv / 8), w, c0, dv, lane);
    uint32_t xa[2][4][4];
    xk_t_frags(xa, Xs + b * C * kLdx, w, lane);
    wgmma_wait<0>();
    fence_regs(acc);
    const float f[2] = {Fb[(b * 2) * 256 + tid], Fb[(b * 2 + 1) * 256 + tid]};
    vn_terms<N, kOne>(acc, Ub + b * NJ * 2 * 256 + tid, 256, f, Vh, Vl, w, lane);  // acc: Vn
    fence_proxy_async();
    scale_state<N>(s, gc);
    bar_sync(bar, 128);  // F Vn's terms complete (and every read of S's terms done)
    issue_update<N, kOne>(s, xa, Vh, Vl);
    // Vn (b_frag) while the update runs
    if (publish) publish_vn<N>(acc, Vn + (slot0 + c) * (C * dv / 8), w, c0, dv, lane);
    wgmma_wait<0>();
    fence_regs(s[0]);
    fence_regs(s[1]);
  }
  store_final<N>(s, Sfin + (static_cast<size_t>(h) * n_seq + seq) * DK * dv, w, c0, dv, lane);
#else
  __trap();  // sm_90a only
#endif
}

// ---- host: inputs, reference, runs
// ---------------------------------------------------------------
uint16_t bf16_bits(float x) {  // the reference's rounding (engine::ref::round_bf16), as bits
  const float r = clef::engine::ref::round_bf16(x);
  uint32_t u;
  std::memcpy(&u, &r, 4);
  return static_cast<uint16_t>(u >> 16);
}
float bits_f(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

struct Problem {
  int Hk = 16, Hv = 32, dv = 128, n_seq = 7, nC = 16;
  std::vector<float> W, U, F, gC, Xk;  // W exact (hi + lo), Xk bf16-exact
  std::vector<uint32_t> Wfrag;         // uint4s as 4 words
  size_t rows() const { return static_cast<size_t>(n_seq) * nC * C; }
  size_t slots() const { return static_cast<size_t>(Hv) * n_seq * nC; }
};

// Contractive random dynamics, like the real ones: unit-norm keys, W ~ beta K, decays < 1.
Problem make_problem(std::mt19937_64& rng, int n_seq, int nC, int Hv, int dv) {
  Problem p;
  p.Hv = Hv, p.Hk = Hv / 2, p.dv = dv, p.n_seq = n_seq, p.nC = nC;
  const size_t T = p.rows();
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  p.Xk.resize(T * p.Hk * DK);
  for (auto& x : p.Xk) x = bits_f(bf16_bits(nd(rng) / std::sqrt(float(DK))));
  p.U.resize(static_cast<size_t>(Hv) * T * dv);
  for (auto& x : p.U) x = nd(rng);
  p.F.resize(static_cast<size_t>(Hv) * T);
  for (auto& x : p.F) x = 0.3f + 0.7f * ud(rng);
  p.gC.resize(p.slots());
  for (auto& x : p.gC) x = 0.8f + 0.19f * ud(rng);
  p.W.resize(static_cast<size_t>(Hv) * T * DK);
  p.Wfrag.resize(p.W.size());  // two bf16 terms of each value = one word a value
  for (int h = 0; h < Hv; ++h)
    for (size_t sc = 0; sc < static_cast<size_t>(n_seq) * nC; ++sc) {
      float w[C][DK];
      uint16_t hi[C][DK], lo[C][DK];
      for (int i = 0; i < C; ++i)
        for (int k = 0; k < DK; ++k) {
          w[i][k] = 0.5f * nd(rng) / std::sqrt(float(DK));
          hi[i][k] = bf16_bits(w[i][k]);
          lo[i][k] = bf16_bits(w[i][k] - bits_f(hi[i][k]));
          p.W[((static_cast<size_t>(h) * T) + sc * C + i) * DK + k] =
              bits_f(hi[i][k]) + bits_f(lo[i][k]);
        }
      // w_frag: [tm][kg][lane][hi, lo] uint4 = A fragment {a0, a1, a2, a3} of m16n8k16
      uint32_t* out = p.Wfrag.data() + (static_cast<size_t>(h) * n_seq * nC + sc) * C * DK;
      for (int tm = 0; tm < 4; ++tm)
        for (int kg = 0; kg < 8; ++kg)
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, t = lane % 4;
            const int rr[4] = {g, g + 8, g, g + 8}, cc[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
            for (int term = 0; term < 2; ++term)
              for (int e = 0; e < 4; ++e) {
                const int i = 16 * tm + rr[e], k = 16 * kg + cc[e];
                const auto& m = term ? lo : hi;
                out[(((tm * 8 + kg) * 32 + lane) * 2 + term) * 4 + e] =
                    static_cast<uint32_t>(m[i][k]) | (static_cast<uint32_t>(m[i][k + 1]) << 16);
              }
          }
    }
  return p;
}

// The exact recurrence (double): every Vn and the final states.
void reference(const Problem& p, std::vector<float>& vn, std::vector<float>& sfin) {
  const size_t T = p.rows();
  vn.assign(static_cast<size_t>(p.Hv) * T * p.dv, 0.f);
  sfin.assign(static_cast<size_t>(p.Hv) * p.n_seq * DK * p.dv, 0.f);
  std::vector<double> S(DK * p.dv), V(C * p.dv);
  for (int h = 0; h < p.Hv; ++h)
    for (int seq = 0; seq < p.n_seq; ++seq) {
      std::fill(S.begin(), S.end(), 0.0);
      for (int c = 0; c < p.nC; ++c) {
        const size_t r0 = static_cast<size_t>(seq) * p.nC * C + c * C;
        for (int i = 0; i < C; ++i) {
          const float* w = &p.W[(static_cast<size_t>(h) * T + r0 + i) * DK];
          for (int n = 0; n < p.dv; ++n) {
            double a = 0;
            for (int k = 0; k < DK; ++k) a += double(w[k]) * S[k * p.dv + n];
            V[i * p.dv + n] = p.U[(static_cast<size_t>(h) * T + r0 + i) * p.dv + n] - a;
            vn[(static_cast<size_t>(h) * T + r0 + i) * p.dv + n] =
                static_cast<float>(V[i * p.dv + n]);
          }
        }
        const double gc = p.gC[(static_cast<size_t>(h) * p.n_seq + seq) * p.nC + c];
        for (auto& x : S) x *= gc;
        for (int i = 0; i < C; ++i) {
          const double f = p.F[static_cast<size_t>(h) * T + r0 + i];
          const float* xk = &p.Xk[((r0 + i) * p.Hk + h / (p.Hv / p.Hk)) * DK];
          for (int k = 0; k < DK; ++k) {
            const double xf = double(xk[k]) * f;
            for (int n = 0; n < p.dv; ++n) S[k * p.dv + n] += xf * V[i * p.dv + n];
          }
        }
      }
      for (size_t e = 0; e < S.size(); ++e)
        sfin[(static_cast<size_t>(h) * p.n_seq + seq) * DK * p.dv + e] = static_cast<float>(S[e]);
    }
}

struct Device {
  Buf W, U, F, gC, Xk, H, Vn, S;
};
Device upload(const Problem& p) {
  Device d;
  d.W = Buf(p.Wfrag.size() * 4);
  DEV_CUDA_CHECK(cudaMemcpy(d.W.get(), p.Wfrag.data(), p.Wfrag.size() * 4, cudaMemcpyHostToDevice));
  d.U = to_device<float>(p.U);
  d.F = to_device<float>(p.F);
  d.gC = to_device<float>(p.gC);
  d.Xk = to_device<bf16>(p.Xk);
  d.H = poisoned<bf16>(p.slots() * DK * p.dv);
  d.Vn = poisoned<bf16>(static_cast<size_t>(p.Hv) * p.rows() * p.dv);
  d.S = poisoned<float>(static_cast<size_t>(p.Hv) * p.n_seq * DK * p.dv);
  return d;
}

// N: the columns a CTA of the hand-over kernel (64 or 32); 0: solo_kernel (64 a CTA, 32 a chain).
template <int N, bool kOne>
void launch(const Problem& p, const Device& d, bool publish) {
  auto k = N == 0 ? solo_kernel<kOne> : chain_kernel < N == 0 ? 64 : N, kOne > ;
  constexpr int bytes = N == 0 ? SoloSmem::kBytes : Smem < N == 0 ? 64 : N > ::kBytes;
  constexpr int cols = N == 0 ? 64 : N;
  static bool set = false;
  if (!set) {
    DEV_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    set = true;
  }
  k<<<dim3(p.dv / cols, p.Hv, p.n_seq), 256, bytes>>>(
      d.W.get<uint4>(), d.U.get<float>(), d.F.get<float>(), d.gC.get<float>(), d.Xk.get<bf16>(),
      p.Hk, p.Hv, p.nC, p.dv, publish, d.H.get<uint4>(), d.Vn.get<uint4>(), d.S.get<float>());
  DEV_CUDA_CHECK(cudaGetLastError());
}

// A published buffer (b_frag order, slots x K x dv bf16 values as floats) back to [slot][K][dv].
std::vector<float> unfrag(const std::vector<float>& f, int slots, int K, int dv) {
  std::vector<float> out(f.size());
  for (int sl = 0; sl < slots; ++sl)
    for (int kk = 0; kk < K / 16; ++kk)
      for (int jp = 0; jp < dv / 16; ++jp)
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          const float* w =
              &f[static_cast<size_t>(sl) * K * dv + ((kk * (dv / 16) + jp) * 32 + lane) * 8];
          // words: b0, b1 of n8 tile 2 jp, then of 2 jp + 1; b0 = rows 2t, 2t+1; b1 = 2t+8, 2t+9
          for (int q = 0; q < 4; ++q)
            for (int e = 0; e < 2; ++e) {
              const int row = 16 * kk + 2 * t + 8 * (q % 2) + e, col = 16 * jp + 8 * (q / 2) + g;
              out[(static_cast<size_t>(sl) * K + row) * dv + col] = w[2 * q + e];
            }
        }
  return out;
}

template <int N, bool kOne>
bool check_variant(const Problem& p, const std::vector<float>& vn, const std::vector<float>& sf) {
  Device d = upload(p);
  launch<N, kOne>(p, d, true);
  const std::string name = std::string(N == 0    ? "wgmma solo32"
                                       : N == 64 ? "wgmma n64"
                                                 : "wgmma n32") +
                           (kOne ? " one-term" : " two-term");
  const double s_tol = kOne ? 2e-2 : 1e-3;
  bool ok = check(name, "S", to_host<float>(d.S, sf.size()), sf, s_tol);
  ok = check(name, "Vn", unfrag(to_host<bf16>(d.Vn, vn.size()), p.Hv * p.n_seq * p.nC, C, p.dv), vn,
             kOne ? 2e-2 : 5e-3) &&
       ok;
  return ok;
}

template <int N, bool kOne>
void time_variant(Timer& timer, const Problem& p, const char* label) {
  Device d = upload(p);
  for (int publish = 1; publish >= 0; --publish) {
    const double us = timer.median_us([&] { launch<N, kOne>(p, d, publish != 0); });
    constexpr int cols = N == 0 ? 64 : N;
    const double steps = static_cast<double>(p.dv / cols) * p.Hv * p.n_seq * p.nC;
    // one chain's step: the time over the chunks a CTA walks, times the waves of CTAs
    const double ctas = static_cast<double>(p.dv / cols) * p.Hv * p.n_seq;
    int sms = 0;
    DEV_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const double waves = std::ceil(ctas / sms);
    std::printf(
        "%-22s %-6s %-9s publish %d  %8.1f us  %6.0f CTAs (%2.0f waves) x %3d chunks  "
        "%5.2f us a step a wave  %6.1f CTA-steps/us\n",
        label,
        N == 0    ? "solo32"
        : N == 64 ? "n64"
                  : "n32",
        kOne ? "one-term" : "two-term", publish, us, ctas, waves, p.nC, us / (waves * p.nC),
        steps / us);
  }
}
}  // namespace

int main() {
  print_device();
  auto rng = make_rng();
  // Check: 2 sequences of 5 chunks, 4 value heads (2 key heads), full width.
  const Problem small = make_problem(rng, 2, 5, 4, 128);
  std::vector<float> vn, sf;
  reference(small, vn, sf);
  bool ok = check_variant<64, false>(small, vn, sf);
  ok = check_variant<32, false>(small, vn, sf) && ok;
  ok = check_variant<64, true>(small, vn, sf) && ok;
  ok = check_variant<32, true>(small, vn, sf) && ok;
  ok = check_variant<0, false>(small, vn, sf) && ok;
  ok = check_variant<0, true>(small, vn, sf) && ok;
  if (!ok) {
    std::printf("gdn_chain: MISMATCH, nothing timed\n");
    return 1;
  }
  Timer timer;
  std::printf(
      "\ntimes: median of 20 runs, L2 %s; engine scan (mma.sync, n64): ~3.7 us a step, "
      "7 x 16 chunks ~239 us (perf-log v25b, v31a)\n",
      timer.cold_l2() ? "flushed" : "warm");
  const Problem pack = make_problem(rng, 7, 16, 32, 128);   // a 7 x 1000 pack's scan
  const Problem chain = make_problem(rng, 1, 87, 32, 128);  // one 5538-token request
  time_variant<0, false>(timer, pack, "pack 7 x 16 chunks");
  time_variant<0, true>(timer, pack, "pack 7 x 16 chunks");
  time_variant<0, false>(timer, chain, "chain 1 x 87 chunks");
  time_variant<0, true>(timer, chain, "chain 1 x 87 chunks");
  time_variant<64, false>(timer, pack, "pack 7 x 16 chunks");
  time_variant<32, false>(timer, pack, "pack 7 x 16 chunks");
  time_variant<64, true>(timer, pack, "pack 7 x 16 chunks");
  time_variant<64, false>(timer, chain, "chain 1 x 87 chunks");
  time_variant<32, false>(timer, chain, "chain 1 x 87 chunks");
  time_variant<64, true>(timer, chain, "chain 1 x 87 chunks");
  time_variant<32, true>(timer, chain, "chain 1 x 87 chunks");
  return 0;
}

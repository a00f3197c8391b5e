// Tensor-core chunked gated delta rule (see gdn/tensor_core.h); notation of gdn/simt.cu, C = 64:
//   gamma = in-chunk cumulative log decay, A_ij = beta_i (k_i.k_j) e^{gamma_i-gamma_j} (i > j),
//   Tm = (I + A)^-1, W = Tm diag(beta e^gamma) K, U = Tm diag(beta) V,
//   Vn = U - W S, O = diag(e^gamma) Q S + ((Q K^T) o Gamma_incl) Vn,
//   S' = e^{gamma_C} S + (K diag(e^{gamma_C - gamma}))^T Vn.
// Three kernels: prep (parallel over chunk x value head), scan (sequential over chunks: only the
// two products on the state's critical path), output (parallel again, from the published states).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/gdn/tensor_core.h"
#include "engine/cuda/gdn/tf32x3.cuh"
#include "engine/cuda/gdn/tiles.cuh"

namespace clef::engine::cuda::gdn {
namespace {

using namespace tf32x3;
constexpr int C = kChunk;
constexpr int kThreads = kTileThreads;  // prep kernel
static_assert(kThreads == 256, "prep: one thread per element of a 16x16 block");
constexpr int kOutThreads = 256;   // output kernel
constexpr int kScanThreads = 256;  // 4 value warps + 4 state warps
// The scan CTA takes NT n8 tiles of value columns (8 NT columns); its shared rows are 8 NT + 2
// words apart, which keeps the B-fragment reads conflict-free for any NT.
template <int NT>
constexpr int scan_ld() {
  return 8 * NT + 2;
}

struct Ws {
  float* W;   // [Hv][Tc][dk]       Tm diag(beta e^gamma) K
  float* U;   // [Hv][Tc][dv]       Tm diag(beta) V
  float* KT;  // [Hv][nC][dk][C]    (K diag(e^{gamma_C - gamma}))^T per chunk
  float* G;   // [Hv][Tc]           gamma
  float* H;   // [Hv][nC][dk][dv]   state before each chunk
  float* Vn;  // [Hv][Tc][dv]       U - W S
};

Ws carve(float* p, int Tc, int Hv, int dk, int dv) {
  const size_t rows = static_cast<size_t>(Hv) * Tc, nC = Tc / C;
  Ws w;
  w.W = p;
  p += rows * dk;
  w.U = p;
  p += rows * dv;
  w.KT = p;
  p += rows * dk;
  w.G = p;
  p += rows;
  w.H = p;
  p += static_cast<size_t>(Hv) * nC * dk * dv;
  w.Vn = p;
  return w;
}

#ifdef CLEF_GDN_PHASE_CLOCKS
// Diagnostic build only (gdn/tensor_core.h: phase_cycles()): cycle sums per phase, measured by one
// thread of the block (`owner`) between its marks, in slots base + i: prep 0..6, output 8..12, scan
// value warps 16..20, state warps 21..25; g_phase_steps counts what they are averaged over (prep
// blocks, output blocks, scan CTA-steps).
__device__ unsigned long long g_phase_cycles[32], g_phase_steps[3];
struct PhaseClock {
  long long t = 0;
  int base, owner;
  __device__ PhaseClock(int b, int group, unsigned long long steps, int own) : base(b), owner(own) {
#ifdef __CUDA_ARCH__
    if (threadIdx.x == owner && steps) atomicAdd(&g_phase_steps[group], steps);
    t = clock64();
#endif
  }
  __device__ void mark(int i) {
#ifdef __CUDA_ARCH__
    if (threadIdx.x != owner) return;
    const long long now = clock64();
    atomicAdd(&g_phase_cycles[base + i], static_cast<unsigned long long>(now - t));
    t = now;
#endif
  }
};
#define CLEF_PHASE_CLOCK(base, group, steps, owner) PhaseClock clk(base, group, steps, owner)
#define CLEF_PHASE(i) clk.mark(i)
#else
#define CLEF_PHASE_CLOCK(base, group, steps, owner) ((void)0)
#define CLEF_PHASE(i) ((void)0)
#endif

__device__ __forceinline__ float4 ldg4(const float* p) {
  return __ldg(reinterpret_cast<const float4*>(p));
}
__device__ __forceinline__ float2 ldg2(const float* p) {
  return __ldg(reinterpret_cast<const float2*>(p));
}

// The 20 m16n8 tiles of a 64 x 64 lower triangle (row tile tm >= column tile n / 2), spread over 8
// warps as 3,3,3,3,2,2,2,2 (one warp per column would give the first two warps 4 tiles each and
// make them the critical path): slot s of `warp` is tile (tm, n), or false when unused.
__device__ __forceinline__ bool xkt_slot(int warp, int s, int& tm, int& n) {
  if (warp < 4) {
    tm = warp / 2 + s, n = warp;
    return true;
  }
  if (s == 2) return false;
  if (warp < 6) {
    tm = 2 + s, n = warp;
    return true;
  }
  tm = 3, n = s == 0 ? warp - 6 : warp;
  return true;
}

// x k^T (3xTF32) for the lower-triangle tiles of `warp` (xkt_slot), handed out element by element
// as emit(i, j, (x k^T)_ij). X, K: 64 rows of d floats at stride ld (8 mod 32), read as pairs
// (permuted k: t <-> 2t, t + 4 <-> 2t + 1). Shared by prep (K K^T) and output (Q K^T). Tiles left
// out (above the diagonal blocks) are not emitted, and the callers never read them.
template <typename Emit>
__device__ __forceinline__ void lower_xkt(const float* X, const float* K, int ld, int d, int warp,
                                          int g, int t, Emit&& emit) {
  float acc[3][4], pc[3][4] = {};
  int tms[3], ns[3];
  bool on[3];
#pragma unroll
  for (int s = 0; s < 3; ++s) {
    on[s] = xkt_slot(warp, s, tms[s], ns[s]);
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[s][c] = 0.0f;
  }
  for (int k0 = 0; k0 < d; k0 += 8) {
    uint32_t bh[2], bl[2];
    int nb = -1;
#pragma unroll
    for (int s = 0; s < 3; ++s) {
      if (!on[s]) continue;
      if (ns[s] != nb) {  // slots of one column share its B fragment
        nb = ns[s];
        const float2 kb = *reinterpret_cast<const float2*>(K + (8 * nb + g) * ld + k0 + 2 * t);
        const float bf[2] = {kb.x, kb.y};
        split(bf, bh, bl);
      }
      const float* r = X + (16 * tms[s] + g) * ld + k0 + 2 * t;
      const float2 x = *reinterpret_cast<const float2*>(r);
      const float2 y = *reinterpret_cast<const float2*>(r + 8 * ld);
      const float af[4] = {x.x, y.x, x.y, y.y};
      uint32_t ah[4], al[4];
      split(af, ah, al);
      mma3(acc[s], pc[s], pc[s], ah, al, bh, bl);
    }
  }
#pragma unroll
  for (int s = 0; s < 3; ++s) {
    if (!on[s]) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c)
      emit(16 * tms[s] + g + 8 * (c / 2), 8 * ns[s] + 2 * t + c % 2, acc[s][c] + pc[s][c]);
  }
}

// out[64 x n] = L R for a lower-triangular L (64 x 64, row stride 4 mod 32) and R (64 x n, row
// stride 8 mod 32), raw m16n8k8 3xTF32 in the standard fragment layout. Warp w takes the n8
// column tiles w and w + 8 for all four row tiles (k stops at each row tile's diagonal); out is
// global memory.
__device__ __forceinline__ void lower_times(const float* L, int ldl, const float* R, int ldr, int n,
                                            float* out, int ldo, int warp, int lane) {
  const int fg = lane / 4, ft = lane % 4;
  bool on[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) on[r] = 8 * (warp + 8 * r) < n;
  if (!on[0]) return;
  float hh[2][4][4] = {}, cc[2][4][4] = {};
  for (int k0 = 0; k0 < C; k0 += 8) {
    uint32_t bh[2][2], bl[2][2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!on[r]) continue;
      const int col = 8 * (warp + 8 * r) + fg;
      const float b[2] = {R[(k0 + ft) * ldr + col], R[(k0 + ft + 4) * ldr + col]};
      split(b, bh[r], bl[r]);
    }
#pragma unroll
    for (int tm = 0; tm < 4; ++tm) {
      if (k0 >= 16 * (tm + 1)) continue;
      const float* l = L + (16 * tm + fg) * ldl + k0 + ft;
      const float a[4] = {l[0], l[8 * ldl], l[4], l[8 * ldl + 4]};
      uint32_t ah[4], al[4];
      split(a, ah, al);
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (on[r]) mma3(hh[r][tm], cc[r][tm], cc[r][tm], ah, al, bh[r], bl[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!on[r]) continue;
#pragma unroll
    for (int tm = 0; tm < 4; ++tm) {
      float* p = out + (16 * tm + fg) * ldo + 8 * (warp + 8 * r) + 2 * ft;
      *reinterpret_cast<float2*>(p) =
          make_float2(hh[r][tm][0] + cc[r][tm][0], hh[r][tm][1] + cc[r][tm][1]);
      *reinterpret_cast<float2*>(p + 8 * ldo) =
          make_float2(hh[r][tm][2] + cc[r][tm][2], hh[r][tm][3] + cc[r][tm][3]);
    }
  }
}

// ---- prep: grid (nC, Hv). Shared: Ks [C][dk+8], Vs [C][dv+8], Am, Tm [C][C+4], X [3][16][16],
// gam, bet, dec, eg [C]. Row strides: 8 mod 32 for tiles read as B fragments or as pairs (K in
// K K^T), 4 mod 32 for tiles read as A fragments (conflict-free fragment loads).
__global__ void __launch_bounds__(kThreads, 2)
    prep_kernel(const float* __restrict__ k, const float* __restrict__ v,
                const float* __restrict__ g, const float* __restrict__ beta, ChunkMap map, int Tc,
                int Hk, int Hv, int dk, int dv, Ws ws) {
  extern __shared__ __align__(128) float smem[];
  const int chunk = blockIdx.x, h = blockIdx.y, kh = h / (Hv / Hk), nC = Tc / C;
  int t0, valid;  // the chunk's first input row and rows
  map.chunk(chunk, t0, valid);
  if (valid <= 0) return;  // an unused slot of a packed batch
  const int ldk = dk + 8, ldv = dv + 8, lda = C + 4;
  float* Ks = smem;
  float* Vs = Ks + C * ldk;
  float* Am = Vs + C * ldv;
  float* Tm = Am + C * lda;
  float* X = Tm + C * lda;
  float* gam = X + 3 * 256;
  float* bet = gam + C;
  float* dec = bet + C;  // e^{gamma_C - gamma_j}
  float* eg = dec + C;   // e^{gamma_j}
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, fg = lane / 4, ft = lane % 4;
  CLEF_PHASE_CLOCK(0, 0, 1, 0);

  load_prep_inputs(Ks, ldk, Vs, ldv, gam, bet, k, v, g, beta, t0, valid, h, kh, Hk, Hv, dk, dv);
  for (int e = tid; e < C * C; e += kThreads) Tm[(e / C) * lda + e % C] = 0.0f;
  __syncthreads();
  CLEF_PHASE(0);    // loads
  if (warp == 0) {  // gamma and its decay vectors
    chunk_cumsum(gam);
    __syncwarp();
    for (int j = lane; j < C; j += 32) dec[j] = __expf(gam[C - 1] - gam[j]), eg[j] = __expf(gam[j]);
  }
  __syncthreads();
  CLEF_PHASE(1);                                                // gamma
  const size_t row0 = static_cast<size_t>(h) * Tc + chunk * C;  // the slot's scratch rows
  // A = beta_i (K K^T)_ij e^{gamma_i - gamma_j} (i > j), lower-triangle tiles as in xkt_slot.
  lower_xkt(Ks, Ks, ldk, dk, warp, fg, ft, [&](int i, int j, float kk) {
    Am[i * lda + j] = i > j ? bet[i] * kk * __expf(gam[i] - gam[j]) : 0.0f;
  });
  __syncthreads();
  CLEF_PHASE(2);  // K K^T
  // Tm = (I + A)^-1 blockwise. Diagonal 16x16 blocks by forward substitution, one thread per
  // column (no syncs inside); then the off-diagonal blocks by distance from the diagonal,
  // T_IJ = -T_II sum_{M=J}^{I-1} A_IM T_MJ (6 syncs instead of 63).
  // Warps 0-1 run the substitution with column j of T_II in registers (fully unrolled: the row
  // loads do not wait on the running sum); meanwhile warps 2-7 store the decayed K^T for the scan
  // and gamma.
  if (tid < 64) {
    const int o = 16 * (tid / 16), j = tid % 16;
    float col[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float s = i == j ? 1.0f : 0.0f;
#pragma unroll
      for (int m = 0; m < i; ++m)
        if (m >= j) s -= Am[(o + i) * lda + o + m] * col[m];
      col[i] = s;
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) Tm[(o + i) * lda + o + j] = col[i];
  } else {
    // a warp covers 4 rows j x 8 columns d (conflict-free reads of Ks)
    float* kt = ws.KT + (static_cast<size_t>(h) * nC + chunk) * dk * C;
    for (int e = tid - 64; e < dk * C; e += kThreads - 64) {
      const int blk = e / 32, l = e % 32, j = 4 * (blk % (C / 4)) + l % 4,
                d = 8 * (blk / (C / 4)) + l / 4;
      kt[d * C + j] = Ks[j * ldk + d] * dec[j];
    }
    if (tid - 64 < C) ws.G[row0 + tid - 64] = gam[tid - 64];
  }
  __syncthreads();
  CLEF_PHASE(3);  // diagonal blocks, decayed K^T
  // Compile-time trip counts (dist unrolled): every operand load is issued ahead of the sums.
#pragma unroll
  for (int dist = 1; dist < 4; ++dist) {
    const int n = (4 - dist) * 256;
#pragma unroll
    for (int e0 = 0; e0 < n; e0 += kThreads) {
      const int e = e0 + tid, I = dist + e / 256, J = I - dist, r = (e / 16) % 16, c = e % 16;
      float s = 0.0f;
#pragma unroll
      for (int kk = 0; kk < 16 * dist; ++kk)
        s += Am[(16 * I + r) * lda + 16 * J + kk] * Tm[(16 * J + kk) * lda + 16 * J + c];
      X[e] = s;
    }
    __syncthreads();
#pragma unroll
    for (int e0 = 0; e0 < n; e0 += kThreads) {
      const int e = e0 + tid, I = dist + e / 256, J = I - dist, r = (e / 16) % 16, c = e % 16;
      const float* x = X + (e / 256) * 256;
      float s = 0.0f;
#pragma unroll
      for (int m = 0; m < 16; ++m)
        if (m <= r) s += Tm[(16 * I + r) * lda + 16 * I + m] * x[m * 16 + c];
      Tm[(16 * I + r) * lda + 16 * J + c] = -s;
    }
    __syncthreads();
  }
  // Am <- Tm diag(beta e^gamma), Tm <- Tm diag(beta) (e^gamma <= 1).
  for (int e = tid; e < C * C; e += kThreads) {
    const int i = e / C, j = e % C;
    const float t = j <= i ? Tm[i * lda + j] : 0.0f;
    Am[i * lda + j] = t * bet[j] * eg[j];
    Tm[i * lda + j] = t * bet[j];
  }
  __syncthreads();
  CLEF_PHASE(4);  // off-diagonal blocks + scaling
  lower_times(Am, lda, Ks, ldk, dk, ws.W + row0 * dk, dk, warp, lane);  // W = Am K
  CLEF_PHASE(5);                                                        // W (warp 0)
  lower_times(Tm, lda, Vs, ldv, dv, ws.U + row0 * dv, dv, warp, lane);  // U = Tm V
  CLEF_PHASE(6);                                                        // U (warp 0)
}

// ---- scan: grid (dv / (8 NT), Hv), sequential over chunks, warp-specialised so that each warp
// keeps only its own operands in registers (no spills at two CTAs per SM):
//   state warps (4..7): hold S [dk][8 NT] as m16n8 accumulators (warp s: rows 16 (s + 4 mi)),
//     publish it per chunk (shared + global), then S = e^{gamma_C} S + KT Vn;
//   value warps (0..3): Vn = U - W S for chunk rows 16 w .. +15, to shared + global.
// A operands (W, KT rows, contiguous in k) come from global memory straight into registers,
// fetched one chunk ahead; their k index is permuted within each 16-column group (thread t holds
// physical columns 4t..4t+3 as logical k = t, t+4 of two k8 steps) so that one float4 load feeds
// two mma steps; B operands read the same permutation from shared memory.
// Two consecutive values stored as their TF32 halves.
__device__ __forceinline__ void put_split(uint32_t* hi, uint32_t* lo, float2 v) {
  const uint32_t h0 = to_tf32(v.x), h1 = to_tf32(v.y);
  *reinterpret_cast<uint2*>(hi) = make_uint2(h0, h1);
  *reinterpret_cast<uint2*>(lo) =
      make_uint2(to_tf32(v.x - __uint_as_float(h0)), to_tf32(v.y - __uint_as_float(h1)));
}

__device__ __forceinline__ void a_frag(const float4& r0, const float4& r1, int s, float (&a)[4]) {
  a[0] = s ? r0.z : r0.x;
  a[1] = s ? r1.z : r1.x;
  a[2] = s ? r0.w : r0.y;
  a[3] = s ? r1.w : r1.y;
}

template <int NT>
using SplitRows = uint32_t (*)[scan_ld<NT>()];

// Named barriers between the two warp roles (256 threads each: 128 arrive, 128 wait). The state is
// published in two halves (rows 0..63, then 64..127) so that the value warps start on the first
// half while the state warps still update the second.
constexpr int kBarTop = 1, kBarBottom = 2, kBarVn = 3;
__device__ __forceinline__ void bar_arrive(int id) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "n"(kScanThreads) : "memory");
}
__device__ __forceinline__ void bar_wait(int id) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(kScanThreads) : "memory");
}

// Vn = U - W S for chunk rows 16 warp .. +15 (value warps 0..3).
template <int NT>
__device__ __noinline__ void scan_values(int Tc, int dk, int dv, const Ws& ws, int h, int c0,
                                         int warp, int g, int t, int first, int nC, int kgs,
                                         SplitRows<NT> Hh, SplitRows<NT> Hl, SplitRows<NT> Vh,
                                         SplitRows<NT> Vl) {
  const size_t r0 = static_cast<size_t>(h) * Tc + static_cast<size_t>(first) * C;
  const float* Wp = ws.W + r0 * dk + (16 * warp + g) * dk + 4 * t;
  const float* Up = ws.U + r0 * dv + (16 * warp + g) * dv + c0 + 2 * t;
  float* Vp = ws.Vn + r0 * dv + (16 * warp + g) * dv + c0 + 2 * t;
  float4 wa[kMaxHeadDim / 16][2];
  float2 ua[2][NT];
  auto load = [&](int chunk) {
    const float* w = Wp + static_cast<size_t>(chunk) * C * dk;
#pragma unroll
    for (int kg = 0; kg < kMaxHeadDim / 16; ++kg)
      if (kg < kgs) wa[kg][0] = ldg4(w + 16 * kg), wa[kg][1] = ldg4(w + 8 * dk + 16 * kg);
    const float* u = Up + static_cast<size_t>(chunk) * C * dv;
#pragma unroll
    for (int n = 0; n < NT; ++n) ua[0][n] = ldg2(u + 8 * n), ua[1][n] = ldg2(u + 8 * dv + 8 * n);
  };
  load(0);
  CLEF_PHASE_CLOCK(16, 2, nC, 0);
  for (int chunk = 0; chunk < nC; ++chunk) {
    float hh[NT][4] = {}, lh[NT][4] = {}, hl[NT][4] = {};
#pragma unroll
    for (int kg = 0; kg < kMaxHeadDim / 16; ++kg) {
      if (kg == 0) {
        CLEF_PHASE(0);      // value: Vn, next loads, publish (previous step)
        bar_wait(kBarTop);  // rows 0..63 of S published
        CLEF_PHASE(1);      // value: wait for the top half
      }
      if (kg == 4) {
        CLEF_PHASE(2);         // value: first half
        bar_wait(kBarBottom);  // rows 64..127
        CLEF_PHASE(3);         // value: wait for the bottom half
      }
      if (kg >= kgs) continue;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        float a[4];
        a_frag(wa[kg][0], wa[kg][1], s, a);
        uint32_t ah[4], al[4];
        split(a, ah, al);
        const int k0 = 16 * kg + 4 * t + 2 * s;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const uint32_t bh[2] = {Hh[k0][8 * n + g], Hh[k0 + 1][8 * n + g]};
          const uint32_t bl[2] = {Hl[k0][8 * n + g], Hl[k0 + 1][8 * n + g]};
          mma3(hh[n], lh[n], hl[n], ah, al, bh, bl);
        }
      }
    }
    CLEF_PHASE(4);  // value: second half
    float2 vn[2][NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      vn[0][n] = make_float2(ua[0][n].x - (hh[n][0] + (lh[n][0] + hl[n][0])),
                             ua[0][n].y - (hh[n][1] + (lh[n][1] + hl[n][1])));
      vn[1][n] = make_float2(ua[1][n].x - (hh[n][2] + (lh[n][2] + hl[n][2])),
                             ua[1][n].y - (hh[n][3] + (lh[n][3] + hl[n][3])));
    }
    const int r = 16 * warp + g;
    float* vp = Vp + static_cast<size_t>(chunk) * C * dv;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      put_split(&Vh[r][8 * n + 2 * t], &Vl[r][8 * n + 2 * t], vn[0][n]);
      put_split(&Vh[r + 8][8 * n + 2 * t], &Vl[r + 8][8 * n + 2 * t], vn[1][n]);
      *reinterpret_cast<float2*>(vp + 8 * n) = vn[0][n];
      *reinterpret_cast<float2*>(vp + 8 * dv + 8 * n) = vn[1][n];
    }
    bar_arrive(kBarVn);
    // Next chunk's operands only now: issuing them stalls while the memory system is busy, and
    // that must not delay the Vn the state warps wait for.
    if (chunk + 1 < nC) load(chunk + 1);
  }
}

// S = e^{gamma_C} S + KT Vn, published per chunk in two halves (state warps 4..7; half mi holds
// the m16 row tiles sw + 4 mi).
template <int NT>
__device__ __noinline__ void scan_states(int Tc, int dk, int dv, const Ws& ws, int h, int c0,
                                         int warp, int g, int t, int first, int nC, int kgs,
                                         SplitRows<NT> Hh, SplitRows<NT> Hl, SplitRows<NT> Vh,
                                         SplitRows<NT> Vl) {
  const int sw = warp - 4;
  // this sequence's slots [first, first + nC) of the Tc / C in the scratch
  const size_t slot0 = static_cast<size_t>(h) * (Tc / C) + first;
  const float* KTp = ws.KT + slot0 * dk * C + 4 * t;
  const float* Gh = ws.G + static_cast<size_t>(h) * Tc + static_cast<size_t>(first) * C;
  float* Hp = ws.H + slot0 * dk * dv + c0 + 2 * t;
  float4 ka[2][C / 16][2];
  float sh[2][NT][4] = {}, sc[2][NT][4] = {};  // S = sh + sc
  auto load = [&](int chunk, int mi) {
    const int mt = sw + 4 * mi;
    if (mt >= kgs) return;
    const float* p = KTp + static_cast<size_t>(chunk) * dk * C;
#pragma unroll
    for (int kg = 0; kg < C / 16; ++kg) {
      ka[mi][kg][0] = ldg4(p + (16 * mt + g) * C + 16 * kg);
      ka[mi][kg][1] = ldg4(p + (16 * mt + g + 8) * C + 16 * kg);
    }
  };
  // half mi of the state before `chunk`, to shared (split) and to the published states
  auto publish = [&](int chunk, int mi) {
    const int mt = sw + 4 * mi;
    if (mt >= kgs) return;
    const int d = 16 * mt + g;
    float* hp = Hp + (static_cast<size_t>(chunk) * dk + d) * dv;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int col = 8 * n + 2 * t;
      const float2 lo = make_float2(sh[mi][n][0] + sc[mi][n][0], sh[mi][n][1] + sc[mi][n][1]);
      const float2 hi = make_float2(sh[mi][n][2] + sc[mi][n][2], sh[mi][n][3] + sc[mi][n][3]);
      put_split(&Hh[d][col], &Hl[d][col], lo);
      put_split(&Hh[d + 8][col], &Hl[d + 8][col], hi);
      *reinterpret_cast<float2*>(hp + 8 * n) = lo;
      *reinterpret_cast<float2*>(hp + 8 * dv + 8 * n) = hi;
    }
  };
  load(0, 0);
  load(0, 1);
  publish(0, 0);  // S_0 = 0
  bar_arrive(kBarTop);
  publish(0, 1);
  bar_arrive(kBarBottom);
  CLEF_PHASE_CLOCK(21, 2, 0, 128);
  for (int chunk = 0; chunk < nC; ++chunk) {
    const float egl = __expf(__ldg(Gh + static_cast<size_t>(chunk) * C + C - 1));
    CLEF_PHASE(0);     // state: second half's load + publish (previous step)
    bar_wait(kBarVn);  // Vn of this chunk ready (and every read of the published halves done)
    CLEF_PHASE(1);     // state: wait for Vn
    if (chunk + 1 == nC) break;  // the state after the last chunk is not needed
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const bool active = sw + 4 * mi < kgs;
      if (active) {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) sh[mi][n][i] *= egl, sc[mi][n][i] *= egl;
#pragma unroll
        for (int kg = 0; kg < C / 16; ++kg) {
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            float a[4];
            a_frag(ka[mi][kg][0], ka[mi][kg][1], s, a);
            uint32_t ah[4], al[4];
            split(a, ah, al);
            const int k0 = 16 * kg + 4 * t + 2 * s;
#pragma unroll
            for (int n = 0; n < NT; ++n) {
              const uint32_t bh[2] = {Vh[k0][8 * n + g], Vh[k0 + 1][8 * n + g]};
              const uint32_t bl[2] = {Vl[k0][8 * n + g], Vl[k0 + 1][8 * n + g]};
              mma3(sh[mi][n], sc[mi][n], sc[mi][n], ah, al, bh, bl);
            }
          }
        }
        CLEF_PHASE(mi == 0 ? 2 : 4);  // state: update half mi
        publish(chunk + 1, mi);
      }
      bar_arrive(mi == 0 ? kBarTop : kBarBottom);
      if (active) load(chunk + 1, mi);  // after the publish the value warps wait for
      if (mi == 0) CLEF_PHASE(3);       // state: first half's publish + load
    }
  }
}

// Two CTAs per SM with 16 columns each; one with 32 (twice the registers per thread).
template <int NT>
__global__ void __launch_bounds__(kScanThreads, NT <= 2 ? 2 : 1)
    scan_kernel(ChunkMap map, int Tc, int dk, int dv, Ws ws) {
  // B operands, published already split into TF32 halves (each is read by four warps)
  extern __shared__ __align__(128) float smem[];
  const SplitRows<NT> Hh = reinterpret_cast<SplitRows<NT>>(smem), Hl = Hh + kMaxHeadDim,
                      Vh = Hl + kMaxHeadDim, Vl = Vh + C;
  const int h = blockIdx.y, c0 = blockIdx.x * 8 * NT;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int kgs = dk / 16;
  int first, nC;  // the chunk slots of sequence blockIdx.z; each sequence starts from S = 0
  map.sequence(blockIdx.z, Tc / C, first, nC);
  if (nC <= 0) return;  // an unused sequence slot (the whole CTA leaves before any barrier)

  // separate functions: each role gets its own register allocation (no spills at 2 CTAs/SM)
  if (warp < 4)
    scan_values<NT>(Tc, dk, dv, ws, h, c0, warp, g, t, first, nC, kgs, Hh, Hl, Vh, Vl);
  else
    scan_states<NT>(Tc, dk, dv, ws, h, c0, warp, g, t, first, nC, kgs, Hh, Hl, Vh, Vl);
}

// ---- output: grid (nC, Hv), kOutThreads (8 warps, two CTAs per SM so that one CTA's loads overlap
// the other's products), raw m16n8k8. Fragments use the k permutation "logical k = t <-> column
// k0 + 2t, k = t + 4 <-> k0 + 2t + 1" so that each A row pair is one 8-byte shared load. Shared
// (row strides 8 mod 32: conflict-free pair loads):
//   Qs [C][dk+8]  Q (fp32), then e^gamma Q as TF32 hi bits;  Ks [C][dk+8]  K, then the lo bits;
//   Ph, Pl [C][C+8]  P = (Q K^T) o Gamma split;  gam [C].
// Warp w owns O columns 16w .. 16w+15 for all 64 rows; its B fragments (S, Vn) come straight from
// global memory (each element is read by one warp only). The two products that form O take B
// rounded to TF32 and keep A exact as hi + lo ("2xTF32", relative error ~2^-12 per product, well
// under the bf16 rounding of O): O feeds nothing sequential, while every product on the recurrence
// (prep, scan) stays 3xTF32.
__device__ __forceinline__ void lds_a(const uint32_t* base, int ld, int row0, int k0, int g, int t,
                                      uint32_t (&a)[4]) {
  const uint2 x = *reinterpret_cast<const uint2*>(base + (row0 + g) * ld + k0 + 2 * t);
  const uint2 y = *reinterpret_cast<const uint2*>(base + (row0 + g + 8) * ld + k0 + 2 * t);
  a[0] = x.x, a[1] = y.x, a[2] = x.y, a[3] = y.y;
}

// acc[r][tm] += A[rows 16 tm..][k] B[k][cols of tile r] for k in [0, K) (and k < 16 (tm + 1) when
// lower), A split in shared memory (ah/al planes, stride lda), B rows in global memory (stride
// ldb), kBatch k8 steps per batch of loads.
template <bool kLower, int kBatch = 2>
__device__ __forceinline__ void times_global_b(float (&hh)[2][4][4], float (&lo)[2][4][4],
                                               const uint32_t* ah_s, const uint32_t* al_s, int lda,
                                               const float* B, int ldb, int K, int col0, bool on1,
                                               int g, int t) {
  for (int kb = 0; kb < K; kb += 8 * kBatch) {
    float bv[kBatch][2][2];
#pragma unroll
    for (int s = 0; s < kBatch; ++s)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int k0 = kb + 8 * s, c = col0 + 8 * r + g;
        const bool ok = k0 < K && (r == 0 || on1);
        bv[s][r][0] = ok ? __ldg(B + static_cast<size_t>(k0 + 2 * t) * ldb + c) : 0.0f;
        bv[s][r][1] = ok ? __ldg(B + static_cast<size_t>(k0 + 2 * t + 1) * ldb + c) : 0.0f;
      }
#pragma unroll
    for (int s = 0; s < kBatch; ++s) {
      const int k0 = kb + 8 * s;
      if (k0 >= K) break;
      uint32_t b[2][2];
#pragma unroll
      for (int r = 0; r < 2; ++r) b[r][0] = to_tf32(bv[s][r][0]), b[r][1] = to_tf32(bv[s][r][1]);
#pragma unroll
      for (int tm = 0; tm < 4; ++tm) {
        if (kLower && k0 >= 16 * (tm + 1)) continue;
        uint32_t ah[4], al[4];
        lds_a(ah_s, lda, 16 * tm, k0, g, t, ah);
        lds_a(al_s, lda, 16 * tm, k0, g, t, al);
        mma2(hh[0][tm], lo[0][tm], ah, al, b[0]);
        if (on1) mma2(hh[1][tm], lo[1][tm], ah, al, b[1]);
      }
    }
  }
}

// The gated RMSNorm epilogue (kNorm, GdnGatedNorm): warp w holds O columns col0 = 16 w .. +15 of
// the chunk's 64 rows as acc[r][tm][c] = O[16 tm + g + 8 (c / 2)][col0 + 8 r + 2 t + c % 2], so
// a row's dv values sit in the four lanes t of group g of every warp: its sum of squares is
// reduced over t by shuffles, then over the warps through `part` ([8][C] floats of shared memory
// no longer read). y is written to o, with gated_rms_norm's element-wise rounding points.
__device__ __forceinline__ void gated_norm_epilogue(const float (&oh)[2][4][4],
                                                    const float (&oc)[2][4][4], bool on0, bool on1,
                                                    const GdnGatedNorm& nrm, float* part, int t0,
                                                    int valid, int h, int Hv, int dv, int col0,
                                                    int warp, int g, int t,
                                                    __nv_bfloat16* __restrict__ o) {
  using bf16 = __nv_bfloat16;
  const bool on[2] = {on0, on1};
  // o rounded to bf16 where the reference materialises it; this thread's part of each row's sum
  float ov[2][4][4], ss[4][2] = {};
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int tm = 0; tm < 4; ++tm)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        ov[r][tm][c] = on[r] ? rnd<bf16>(oh[r][tm][c] + oc[r][tm][c]) : 0.0f;
        ss[tm][c / 2] += ov[r][tm][c] * ov[r][tm][c];
      }
  // z of the rows this thread writes, issued before the reduction so that it hides their latency
  uint32_t zp[2][4][2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int tm = 0; tm < 4; ++tm)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int i = 16 * tm + g + 8 * hr;
        zp[r][tm][hr] = on[r] && i < valid ? __ldg(reinterpret_cast<const unsigned int*>(
                                                 nrm.z + static_cast<size_t>(t0 + i) * nrm.ldz +
                                                 h * dv + col0 + 8 * r + 2 * t))
                                           : 0u;
      }
#pragma unroll
  for (int tm = 0; tm < 4; ++tm)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      ss[tm][hr] += __shfl_xor_sync(0xffffffffu, ss[tm][hr], 1);
      ss[tm][hr] += __shfl_xor_sync(0xffffffffu, ss[tm][hr], 2);
    }
  __syncthreads();  // every warp is done reading the P planes that `part` overlays
  if (t == 0)
#pragma unroll
    for (int tm = 0; tm < 4; ++tm)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) part[warp * C + 16 * tm + g + 8 * hr] = ss[tm][hr];
  __syncthreads();
  if (!on0) return;
  float wv[2][2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float2 w2 = on[r] ? ldg2(nrm.w + col0 + 8 * r + 2 * t) : make_float2(0.0f, 0.0f);
    wv[r][0] = w2.x, wv[r][1] = w2.y;
  }
#pragma unroll
  for (int tm = 0; tm < 4; ++tm)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int i = 16 * tm + g + 8 * hr;
      if (i >= valid) continue;
      float sum = 0.0f;  // warps past dv added zeros
#pragma unroll
      for (int w = 0; w < kOutThreads / 32; ++w) sum += part[w * C + i];
      const float rs = rsqrtf(sum / static_cast<float>(dv) + nrm.eps);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (!on[r]) continue;
        const uint32_t zz = zp[r][tm][hr];
        float y[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float n = rnd<bf16>(ov[r][tm][2 * hr + e] * rs);
          const float zw = rnd<bf16>(wv[r][e] * n);
          const float zf = __uint_as_float(e == 0 ? zz << 16 : zz & 0xffff0000u);  // exact widening
          y[e] = zw * silu_f(zf);
        }
        *reinterpret_cast<__nv_bfloat162*>(o + (static_cast<size_t>(t0 + i) * Hv + h) * dv + col0 +
                                           8 * r + 2 * t) = __floats2bfloat162_rn(y[0], y[1]);
      }
    }
}

template <typename E, bool kNorm>
__global__ void __launch_bounds__(kOutThreads, 2)
    output_kernel(const float* __restrict__ q, const float* __restrict__ k, ChunkMap map, int Tc,
                  int Hk, int Hv, int dk, int dv, Ws ws, GdnGatedNorm nrm, E* __restrict__ o) {
  constexpr int NW = kOutThreads / 32;
  extern __shared__ __align__(128) float smem[];
  const int chunk = blockIdx.x, h = blockIdx.y, kh = h / (Hv / Hk), nC = Tc / C;
  int t0, valid;  // the chunk's first input row and rows
  map.chunk(chunk, t0, valid);
  if (valid <= 0) return;
  const int ldq = dk + 8, ldp = C + 8;
  float* Qs = smem;
  float* Ks = Qs + C * ldq;
  uint32_t* Ph = reinterpret_cast<uint32_t*>(Ks + C * ldq);
  uint32_t* Pl = Ph + C * ldp;
  float* gam = reinterpret_cast<float*>(Pl + C * ldp);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const size_t row0 = static_cast<size_t>(h) * Tc + chunk * C;  // the slot's scratch rows
  CLEF_PHASE_CLOCK(8, 1, 1, 0);

  load_tiles<kOutThreads>(
      Qs, ldq, q + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk, dk, Ks,
      ldq, k + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk, dk, valid);
  if (tid < C) gam[tid] = ws.G[row0 + tid];
  __syncthreads();
  CLEF_PHASE(0);  // loads

  // P = (Q K^T) o Gamma_incl, lower-triangle tiles as in xkt_slot (the product reads no tile above
  // the diagonal blocks).
  static_assert(NW == 8, "xkt_slot spreads the tiles over 8 warps");
  lower_xkt(Qs, Ks, ldq, dk, warp, g, t, [&](int i, int j, float qk) {
    const float p = i >= j ? qk * __expf(gam[i] - gam[j]) : 0.0f;
    const uint32_t hi = to_tf32(p);
    Ph[i * ldp + j] = hi;
    Pl[i * ldp + j] = to_tf32(p - __uint_as_float(hi));
  });
  __syncthreads();
  CLEF_PHASE(1);  // P = Q K^T o Gamma
  // e^gamma Q as TF32 halves: hi over Qs, lo over Ks (K is no longer needed).
  uint32_t* Qh = reinterpret_cast<uint32_t*>(Qs);
  uint32_t* Ql = reinterpret_cast<uint32_t*>(Ks);
  for (int i = warp; i < C; i += NW) {
    const float sc = __expf(gam[i]);
    for (int d = lane; d < dk; d += 32) {
      const float x = Qs[i * ldq + d] * sc;
      const uint32_t hi = to_tf32(x);
      Qh[i * ldq + d] = hi;
      Ql[i * ldq + d] = to_tf32(x - __uint_as_float(hi));
    }
  }
  __syncthreads();
  CLEF_PHASE(2);  // e^gamma Q split
  // O = (e^gamma Q) S + P Vn for columns 16 warp .. +15.
  const int col0 = 16 * warp;
  const bool on0 = col0 < dv, on1 = col0 + 8 < dv;
  if (!kNorm && !on0) return;  // the norm's barriers need every warp
  float oh[2][4][4] = {}, oc[2][4][4] = {};
  if (on0) {
    times_global_b<false>(oh, oc, Qh, Ql, ldq,
                          ws.H + (static_cast<size_t>(h) * nC + chunk) * dk * dv, dv, dk, col0, on1,
                          g, t);
    CLEF_PHASE(3);  // (e^gamma Q) S (warp 0)
    times_global_b<true>(oh, oc, Ph, Pl, ldp, ws.Vn + row0 * dv, dv, C, col0, on1, g, t);
    CLEF_PHASE(4);  // + P Vn (warp 0)
  }
  if constexpr (kNorm) {
    static_assert(std::is_same_v<E, __nv_bfloat16>, "the fused gated norm is bf16");
    static_assert(NW * C <= C * (C + 8), "the partial sums fit in the P planes");
    gated_norm_epilogue(oh, oc, on0, on1, nrm, reinterpret_cast<float*>(Ph), t0, valid, h, Hv, dv,
                        col0, warp, g, t, o);
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (r == 1 && !on1) break;
#pragma unroll
      for (int tm = 0; tm < 4; ++tm) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int i = 16 * tm + g + 8 * hr;
          if (i >= valid) continue;
          E* dst = o + (static_cast<size_t>(t0 + i) * Hv + h) * dv + col0 + 8 * r + 2 * t;
          dst[0] = from_f<E>(oh[r][tm][2 * hr] + oc[r][tm][2 * hr]);
          dst[1] = from_f<E>(oh[r][tm][2 * hr + 1] + oc[r][tm][2 * hr + 1]);
        }
      }
    }
  }
}

template <int NT>
void launch_scan_nt(const ChunkMap& map, int seqs, int Tc, int dk, int dv, int Hv, const Ws& ws,
                    cudaStream_t s) {
  const size_t bytes = sizeof(uint32_t) * 2 * (kMaxHeadDim + C) * scan_ld<NT>();
  CLEF_CUDA_CHECK(cudaFuncSetAttribute(scan_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
  scan_kernel<NT><<<dim3(dv / (8 * NT), Hv, seqs), kScanThreads, bytes, s>>>(map, Tc, dk, dv, ws);
  CLEF_CUDA_LAUNCH_CHECK();
}

void launch_scan(const ChunkMap& map, int seqs, int Tc, int dk, int dv, int Hv, const Ws& ws,
                 cudaStream_t s) {
  // 32 columns per CTA where dv allows: half the CTAs re-reading each chunk's W and K^T from L2,
  // which bounds the scan's step time (H200, 961 tokens: 94 -> 86-90 us per layer).
  if (dv % 32 == 0)
    launch_scan_nt<4>(map, seqs, Tc, dk, dv, Hv, ws, s);
  else
    launch_scan_nt<2>(map, seqs, Tc, dk, dv, Hv, ws, s);
}

size_t prep_smem(int dk, int dv) {
  return sizeof(float) * (static_cast<size_t>(C) * (dk + 8) + static_cast<size_t>(C) * (dv + 8) +
                          2 * C * (C + 4) + 3 * 256 + 4 * C);
}
size_t output_smem(int dk, int /*dv*/) {
  return sizeof(float) * (2 * C * (dk + 8) + 2 * C * (C + 8) + C);
}

}  // namespace

bool tc_supported(int dk, int dv) {
  if (dk % 16 != 0 || dv % 16 != 0 || dk < 16 || dv < 16 || dk > kMaxHeadDim || dv > kMaxHeadDim)
    return false;
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: do not leave it for the next launch check
    return false;
  }
  return std::max(prep_smem(dk, dv), output_smem(dk, dv)) <= static_cast<size_t>(optin);
}

#ifdef CLEF_GDN_PHASE_CLOCKS
std::vector<double> phase_cycles() {
  unsigned long long c[32], b[3];
  CLEF_CUDA_CHECK(cudaMemcpyFromSymbol(c, g_phase_cycles, sizeof c));
  CLEF_CUDA_CHECK(cudaMemcpyFromSymbol(b, g_phase_steps, sizeof b));
  const unsigned long long zc[32] = {}, zb[3] = {};
  CLEF_CUDA_CHECK(cudaMemcpyToSymbol(g_phase_cycles, zc, sizeof zc));
  CLEF_CUDA_CHECK(cudaMemcpyToSymbol(g_phase_steps, zb, sizeof zb));
  std::vector<double> out(32);
  for (int i = 0; i < 32; ++i) {
    const unsigned long long n = b[i < 8 ? 0 : i < 16 ? 1 : 2];
    out[i] = n ? double(c[i]) / n : 0.0;
  }
  return out;
}
#endif

size_t tc_workspace_floats(int Tc, int Hv, int dk, int dv) {
  const size_t rows = static_cast<size_t>(Hv) * Tc, nC = Tc / C;
  return rows * (2 * dk + 2 * dv + 1) + static_cast<size_t>(Hv) * nC * dk * dv;
}

void chunked_tc(const float* q, const float* k, const float* v, const float* g, const float* beta,
                int T, int Hk, int Hv, int dk, int dv, __nv_bfloat16* o, float* workspace,
                cudaStream_t s, cudaEvent_t between, cudaEvent_t after_scan,
                const GdnSequences* seqs, const GdnGatedNorm* norm) {
  const ChunkMap map = seqs ? ChunkMap{seqs->chunk_row0, seqs->chunk_valid, seqs->seq_chunk0, T}
                            : ChunkMap{nullptr, nullptr, nullptr, T};
  const int nC = seqs ? seqs->chunk_slots : (T + C - 1) / C, Tc = nC * C;
  const int n_seqs = seqs ? seqs->seq_slots : 1;
  const Ws ws = carve(workspace, Tc, Hv, dk, dv);
  const size_t ps = prep_smem(dk, dv), os = output_smem(dk, dv);
  CLEF_CUDA_CHECK(cudaFuncSetAttribute(prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(ps)));
  auto* out = norm ? output_kernel<__nv_bfloat16, true> : output_kernel<__nv_bfloat16, false>;
  CLEF_CUDA_CHECK(
      cudaFuncSetAttribute(out, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(os)));
  prep_kernel<<<dim3(nC, Hv), kThreads, ps, s>>>(k, v, g, beta, map, Tc, Hk, Hv, dk, dv, ws);
  CLEF_CUDA_LAUNCH_CHECK();
  if (between) CLEF_CUDA_CHECK(cudaEventRecord(between, s));
  launch_scan(map, n_seqs, Tc, dk, dv, Hv, ws, s);
  if (after_scan) CLEF_CUDA_CHECK(cudaEventRecord(after_scan, s));
  out<<<dim3(nC, Hv), kOutThreads, os, s>>>(q, k, map, Tc, Hk, Hv, dk, dv, ws,
                                            norm ? *norm : GdnGatedNorm{}, o);
  CLEF_CUDA_LAUNCH_CHECK();
}

}  // namespace clef::engine::cuda::gdn

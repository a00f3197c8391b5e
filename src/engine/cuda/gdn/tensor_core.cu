// Tensor-core chunked gated delta rule (see gdn/tensor_core.h); notation of gdn/simt.cu, C = 64:
//   gamma = in-chunk cumulative log decay, A_ij = beta_i (k_i.k_j) e^{gamma_i-gamma_j} (i > j),
//   Tm = (I + A)^-1, W = Tm diag(beta e^gamma) K, U = Tm diag(beta) V,
//   Vn = U - W S, O = diag(e^gamma) Q S + ((Q K^T) o Gamma_incl) Vn,
//   S' = e^{gamma_C} S + (K diag(e^{gamma_C - gamma}))^T Vn.
// Three kernels: prep (parallel over chunk x value head), scan (sequential over chunks: only the
// two products on the state's critical path), output (parallel again, from the published states).
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_attributes.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/gdn/bf16_split.cuh"
#include "engine/cuda/gdn/fragments.cuh"
#include "engine/cuda/gdn/tensor_core.h"
#include "engine/cuda/gdn/tf32x3.cuh"
#include "engine/cuda/gdn/tiles.cuh"
#include "engine/cuda/hopper_async.cuh"

namespace clef::engine::cuda::gdn {
namespace {

using namespace tf32x3;
constexpr int C = kChunk;
constexpr int kThreads = kTileThreads;  // prep kernel
static_assert(kThreads == 256, "prep: one thread per element of a 16x16 block");
constexpr int kOutThreads = 256;   // output kernel
constexpr int kScanThreads = 256;  // 4 value warps + 4 state warps (8 value warps: no faster)
constexpr int kScanOutThreads = kScanThreads + 128;  // + 4 output warps (scan_outputs)
using bf16 = __nv_bfloat16;
// bf16 row strides of the prep and output kernels' shared tiles: an odd number of 16-byte chunks,
// so the 8 rows one ldmatrix 8x8 matrix reads start in 8 different 4-bank groups.
constexpr int kLdx = kMaxHeadDim + 8;  // X tiles (q, k, v rows)
constexpr int kLdp = C + 8;            // the P terms

struct Ws {
  float* W;   // [Hv][Tc][dk]       Tm diag(beta e^gamma) K as the scan's A fragments (w_frag)
  float* U;   // [Hv][Tc][dv]       Tm diag(beta) V
  float* F;   // [Hv][Tc]           rk e^{gamma_C - gamma}: K diag(e^{gamma_C - gamma}) = diag(F) Xk
  float* G;   // [Hv][Tc]           gamma
  uint4* H;   // [Hv][nC] x dk dv bf16: the state before each chunk, as b_frag
  uint4* Vn;  // [Hv][nC] x C dv bf16: U - W S, as b_frag
  // A packed scan's progress (ScanLaunch::progress): [nC][Hv][kProgressSlots], the chunks whose
  // state and Vn each column CTA of a (sequence slot, value head) has stored (zeroed by prep); the
  // output kernel's order of the chunk slots (prep): (sequence slot << 16) | chunk slot, by index
  // of the chunk within its sequence, then by sequence slot; unused slots last.
  int* progress;
  int* order;
};
// Progress slots a (sequence slot, value head): one a column CTA (dv / (8 NT) <= 8).
constexpr int kProgressSlots = 8;

Ws carve(float* p, int Tc, int Hv, int dk, int dv) {
  const size_t rows = static_cast<size_t>(Hv) * Tc, nC = Tc / C;
  Ws w;
  w.W = p;
  p += rows * dk;
  w.U = p;
  p += rows * dv;
  w.F = p;
  p += rows;
  w.G = p;
  p += rows;
  w.H = reinterpret_cast<uint4*>(p);
  p += static_cast<size_t>(Hv) * nC * dk * dv / 2;
  w.Vn = reinterpret_cast<uint4*>(p);
  p += rows * dv / 2;
  w.progress = reinterpret_cast<int*>(p);
  p += nC * Hv * kProgressSlots;
  w.order = reinterpret_cast<int*>(p);
  return w;
}

#ifdef CLEF_GDN_PHASE_CLOCKS
// Diagnostic build only (gdn/tensor_core.h: phase_cycles()): cycle sums per phase, measured by one
// thread of the block (`owner`) between its marks, in slots base + i: prep 0..6, output 8..12, scan
// value warps 16..22, state warps 23..27; g_phase_steps counts what they are averaged over (prep
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

__device__ __forceinline__ float2 ldg2(const float* p) {
  return __ldg(reinterpret_cast<const float2*>(p));
}

// `bytes` (a multiple of 16) from 16-byte aligned global memory asked into L2 by one bulk request,
// no registers held and nothing to wait for (sm_90; elsewhere nothing): the scan's register loads
// of what prep published then wait for L2, not DRAM (perf-log v25c).
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p, (void)bytes;
#endif
}

// Programmatic dependent launch (sm_90; chunked_tc launches prep, scan and output with it): a
// kernel starts while its predecessor drains and waits here before its first read of what the
// predecessor wrote (the wait returns at once where the launch had no programmatic edge);
// `allow_dependents` lets the next kernel's CTAs be scheduled before this grid ends.
__device__ __forceinline__ void wait_predecessor() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// A packed scan's progress to the output kernel (ScanLaunch::progress): a column CTA's count of the
// chunks whose state and Vn are all stored, released at gpu scope by one thread; an output CTA
// acquires every count its chunk needs before reading them (by ld.global.cg: they are written while
// it runs).
__device__ __forceinline__ void release_progress(int* p, int count) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(count) : "memory");
}
__device__ __forceinline__ int acquire_progress(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// A kernel of the core a pack did not choose (ChunkMap::core) leaves at once, but only after its
// predecessor: the next kernel's programmatic edge is to this one, so this one must not end before
// everything ahead of it has.
__device__ __forceinline__ bool skip_core(const ChunkMap& map) {
  if (!map.core_skipped()) return false;
  wait_predecessor();
  return true;
}

// Two 64-row bf16 tiles by a block of THREADS threads, every load in flight at once: row i of tile
// X (colsX bf16, colsX % 8 == 0, 16-byte aligned) is at srcX + i * strideX and lands at dstX + i *
// kLdx; rows at or past `valid` read as zero (the padded tail of the last chunk stays inert).
template <int THREADS>
__device__ __forceinline__ void load_x_tiles(bf16* __restrict__ dstA, const bf16* __restrict__ srcA,
                                             size_t strideA, int colsA, bf16* __restrict__ dstB,
                                             const bf16* __restrict__ srcB, size_t strideB,
                                             int colsB, int valid) {
  constexpr int kVec = C * kMaxHeadDim / 8 / THREADS;  // 16-byte pieces per thread per tile
  const int a8 = colsA / 8, b8 = colsB / 8;
  uint4 va[kVec], vb[kVec];
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int r = 0; r < kVec; ++r) {
    const int e = threadIdx.x + r * THREADS, ia = e / a8, ib = e / b8;
    va[r] = e < C * a8 && ia < valid
                ? __ldg(reinterpret_cast<const uint4*>(srcA + ia * strideA + (e % a8) * 8))
                : zero;
    vb[r] = e < C * b8 && ib < valid
                ? __ldg(reinterpret_cast<const uint4*>(srcB + ib * strideB + (e % b8) * 8))
                : zero;
  }
#pragma unroll
  for (int r = 0; r < kVec; ++r) {
    const int e = threadIdx.x + r * THREADS;
    if (e < C * a8) *reinterpret_cast<uint4*>(dstA + (e / a8) * kLdx + (e % a8) * 8) = va[r];
    if (e < C * b8) *reinterpret_cast<uint4*>(dstB + (e / b8) * kLdx + (e % b8) * 8) = vb[r];
  }
}

// One 64-row bf16 tile as load_x_tiles, by cp.async (no registers held, committed as one group):
// rows at or past `valid` are zero-filled.
template <int THREADS>
__device__ __forceinline__ void copy_x_tile_async(bf16* dst, const bf16* src, size_t stride,
                                                  int cols, int valid) {
  const int c8 = cols / 8;
  for (int e = threadIdx.x; e < C * c8; e += THREADS) {
    const int i = e / c8, c = (e % c8) * 8;
    cp_async16(dst + i * kLdx + c, i < valid ? src + i * stride + c : src, i < valid ? 16 : 0);
  }
  cp_async_commit();
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

// (X Y^T)_ij on bf16 tensor cores (exact products, fp32 sums) for the lower-triangle tiles of
// `warp` (xkt_slot), handed out element by element as emit(i, j, (X Y^T)_ij). X, Y: 64 rows of d
// bf16 (d % 16 == 0) kLdx apart. Shared by prep (Xk Xk^T) and output (Xq Xk^T); tiles above the
// diagonal blocks are not emitted, and the callers never read them.
template <typename Emit>
__device__ __forceinline__ void lower_xyt(const bf16* X, const bf16* Y, int d, int warp, int lane,
                                          Emit&& emit) {
  float acc[3][4] = {};
  int tms[3], ns[3];
  bool on[3];
#pragma unroll
  for (int s = 0; s < 3; ++s) on[s] = xkt_slot(warp, s, tms[s], ns[s]);
  for (int k0 = 0; k0 < d; k0 += 16) {
#pragma unroll
    for (int s = 0; s < 3; ++s) {
      if (!on[s]) continue;
      uint32_t a[4], b[2];
      ldmatrix_x4(a, X + (16 * tms[s] + lane % 16) * kLdx + k0 + 8 * (lane / 16));
      ldmatrix_x2(b, Y + (8 * ns[s] + lane % 8) * kLdx + k0 + 8 * ((lane / 8) % 2));
      mma_bf16(acc[s], a, b[0], b[1]);
    }
  }
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int s = 0; s < 3; ++s) {
    if (!on[s]) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c)
      emit(16 * tms[s] + g + 8 * (c / 2), 8 * ns[s] + 2 * t + c % 2, acc[s][c]);
  }
}

// Lane offset of ldmatrix_x4_trans over a [k][n] bf16 tile (row stride ld) giving the B fragments
// of n8 tiles 2 np and 2 np + 1 at k16 step k0: {b0, b1} of the first, then of the second.
__device__ __forceinline__ int b_pair_offset(int k0, int np, int ld, int lane) {
  return (k0 + lane % 8 + 8 * ((lane / 8) % 2)) * ld + 16 * np + 8 * (lane / 16);
}

// out[64 x d] = (L diag(f)) X for the lower-triangular L (64 x 64 fp32, row stride lda) and X (64 x
// d bf16, rows kLdx apart, d % 16 == 0): L diag(f) split into three bf16 terms (fp32 accuracy), X
// exact. Warp w takes row tiles {0, 3} (w < 4) or {1, 2} (five k16 steps either way) and columns
// 32 (w % 4) .. +31; out is global memory: fp32 rows ldo apart, or with kFrag the scan's A
// fragments (w_frag; a lane's accumulators of two n8 tiles are its A fragment of their k16 step).
template <bool kFrag>
__device__ __forceinline__ void lower_times(const float* L, int lda, const float* f, const bf16* X,
                                            int d, float* out, int ldo, int warp, int lane) {
  const int c0 = 32 * (warp % 4), g = lane / 4, t = lane % 4;
  if (c0 >= d) return;
  const bool on1 = c0 + 16 < d;  // the second 16-column half
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const int tm = warp < 4 ? 3 * s : 1 + s;
    float acc[4][4] = {};
    for (int kk = 0; kk <= tm; ++kk) {
      const float* l = L + (16 * tm + g) * lda + 16 * kk + 2 * t;
      const float2 f0 = *reinterpret_cast<const float2*>(f + 16 * kk + 2 * t);
      const float2 f1 = *reinterpret_cast<const float2*>(f + 16 * kk + 2 * t + 8);
      const float2 x0 = *reinterpret_cast<const float2*>(l);
      const float2 x1 = *reinterpret_cast<const float2*>(l + 8 * lda);
      const float2 x2 = *reinterpret_cast<const float2*>(l + 8);
      const float2 x3 = *reinterpret_cast<const float2*>(l + 8 * lda + 8);
      uint32_t p0[3], p1[3], p2[3], p3[3];
      split_pair(x0.x * f0.x, x0.y * f0.y, p0);
      split_pair(x1.x * f0.x, x1.y * f0.y, p1);
      split_pair(x2.x * f1.x, x2.y * f1.y, p2);
      split_pair(x3.x * f1.x, x3.y * f1.y, p3);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        if (np == 1 && !on1) break;
        uint32_t b[4];
        ldmatrix_x4_trans(b, X + c0 + b_pair_offset(16 * kk, np, kLdx, lane));
#pragma unroll
        for (int p = 0; p < 3; ++p) {
          const uint32_t a[4] = {p0[p], p1[p], p2[p], p3[p]};
          mma_bf16(acc[2 * np], a, b[0], b[1]);
          mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
        }
      }
    }
    if constexpr (kFrag) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        if (q == 1 && !on1) break;
        uint32_t p[4][2];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          split_pair(acc[2 * q + i / 2][2 * (i % 2)], acc[2 * q + i / 2][2 * (i % 2) + 1], p[i]);
        uint4* o = reinterpret_cast<uint4*>(out) + w_frag(tm, c0 / 16 + q, d / 16, lane);
        o[0] = make_uint4(p[0][0], p[1][0], p[2][0], p[3][0]);
        o[1] = make_uint4(p[0][1], p[1][1], p[2][1], p[3][1]);
      }
    } else {
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        if (n >= 2 && !on1) break;
        float* p = out + (16 * tm + g) * ldo + c0 + 8 * n + 2 * t;
        *reinterpret_cast<float2*>(p) = make_float2(acc[n][0], acc[n][1]);
        *reinterpret_cast<float2*>(p + 8 * ldo) = make_float2(acc[n][2], acc[n][3]);
      }
    }
  }
}

// The output kernel's order of the nC chunk slots of a packed grid (Ws::order), by one CTA: chunk
// j of every sequence before chunk j + 1 of any, ties in sequence slot order. A scan CTA publishes
// its chunks in order, so the output CTAs dispatched first are those whose chunks are ready
// first, and the ones waiting for a long request's chain come last. Rank of slot c (chunk j of
// sequence s): sum over sequences of min(n, j), plus the sequences before s with more than j.
__device__ void output_order(const ChunkMap& map, int n_seqs, int nC, int* order) {
  int used, n0;
  map.sequence(n_seqs - 1, nC, used, n0);
  used += n0;
  for (int c = threadIdx.x; c < nC; c += blockDim.x) {
    if (c >= used) {  // unused slots keep their place after the used ones
      order[c] = c;
      continue;
    }
    int s = 0, first = 0, n = 0;
    for (; s < n_seqs; ++s) {
      map.sequence(s, nC, first, n);
      if (c < first + n) break;
    }
    const int j = c - first;
    int rank = 0;
    for (int q = 0; q < n_seqs; ++q) {
      int f, m;
      map.sequence(q, nC, f, m);
      rank += min(m, j) + (q < s && m > j);
    }
    order[rank] = (s << 16) | c;
  }
}

// ---- prep: grid (nC, Hv). Shared: Am, Tm [C][C+4] fp32 (row stride 4 mod 32: conflict-free pair
// loads of the A fragments), X [3][16][16], gam, bet, dec, rks, cw [C], Xk [C][kLdx] bf16; Xv
// [C][kLdx] bf16 over Am once the inverse is done (55.25 KiB: four CTAs per SM).
// kFused (the fused core's prep, fused_kernel below): instead of W and U, T' = Tm diag(beta) and
// P = (Q K^T) o Gamma_incl, fp32 [C][C] each, in the slot's W rows (T' first; dk >= 2 C floats a
// row hold both); xq and rq are read only then.
template <bool kFused>
__global__ void __launch_bounds__(kThreads, 4)
    prep_kernel(const bf16* __restrict__ xk, const bf16* __restrict__ xv,
                const float* __restrict__ rk, const float* __restrict__ g,
                const float* __restrict__ beta, ChunkMap map, int Tc, int Hk, int Hv, int dk,
                int dv, Ws ws, const bf16* __restrict__ xq, const float* __restrict__ rq,
                int n_seqs, bool progress) {
  if (skip_core(map)) return;
  extern __shared__ __align__(128) float smem[];
  const int chunk = blockIdx.x, h = blockIdx.y, kh = h / (Hv / Hk);
  if (progress) {
    // The scan's progress counts of (sequence slot `chunk`, head h) from zero (nC >= n_seqs); the
    // scan waits for this grid before it counts, and the output kernel starts after the scan has.
    if (chunk < n_seqs && threadIdx.x < kProgressSlots)
      ws.progress[(static_cast<size_t>(chunk) * Hv + h) * kProgressSlots + threadIdx.x] = 0;
    if (chunk == 0 && h == 0) output_order(map, n_seqs, Tc / C, ws.order);
  }
  int t0, valid;  // the chunk's first input row and rows
  map.chunk(chunk, t0, valid);
  if (valid <= 0) return;  // an unused slot of a packed batch
  const int lda = C + 4;
  float* Am = smem;
  float* Tm = Am + C * lda;
  float* X = Tm + C * lda;
  float* gam = X + 3 * 256;
  float* bet = gam + C;
  float* dec = bet + C;  // e^{gamma_C - gamma_j}
  float* rks = dec + C;  // k = xk rk
  float* cw = rks + C;   // W's column factors beta_j e^{gamma_j} rk_j
  bf16* Xk = reinterpret_cast<bf16*>(cw + C);
  bf16* Xv = reinterpret_cast<bf16*>(Am);  // after the inverse
  static_assert(C * kLdx * sizeof(bf16) <= C * (C + 4) * sizeof(float), "Xv fits over Am");
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  CLEF_PHASE_CLOCK(0, 0, 1, 0);

  wait_predecessor();  // the conv prep's xk, xv, rk, g, beta
  copy_x_tile_async<kThreads>(Xk, xk + (static_cast<size_t>(t0) * Hk + kh) * dk,
                              static_cast<size_t>(Hk) * dk, dk, valid);
  if (tid < C) {
    const bool in = tid < valid;
    gam[tid] = in ? g[static_cast<size_t>(t0 + tid) * Hv + h] : 0.0f;
    bet[tid] = in ? beta[static_cast<size_t>(t0 + tid) * Hv + h] : 0.0f;
    rks[tid] = in ? rk[static_cast<size_t>(t0 + tid) * Hk + kh] : 0.0f;
  }
  for (int e = tid; e < C * C; e += kThreads) Tm[(e / C) * lda + e % C] = 0.0f;
  cp_async_wait<0>();
  __syncthreads();
  CLEF_PHASE(0);    // loads
  if (warp == 0) {  // gamma and its decay vectors
    chunk_cumsum(gam);
    __syncwarp();
    for (int j = lane; j < C; j += 32)
      dec[j] = __expf(gam[C - 1] - gam[j]), cw[j] = bet[j] * __expf(gam[j]) * rks[j];
  }
  __syncthreads();
  CLEF_PHASE(1);                                                // gamma
  const size_t row0 = static_cast<size_t>(h) * Tc + chunk * C;  // the slot's scratch rows
  // A = beta_i (K K^T)_ij e^{gamma_i - gamma_j} (i > j), K K^T = diag(rk) Xk Xk^T diag(rk).
  lower_xyt(Xk, Xk, dk, warp, lane, [&](int i, int j, float xx) {
    Am[i * lda + j] = i > j ? bet[i] * (xx * rks[i] * rks[j]) * __expf(gam[i] - gam[j]) : 0.0f;
  });
  __syncthreads();
  CLEF_PHASE(2);  // K K^T
  // Tm = (I + A)^-1 blockwise. Diagonal 16x16 blocks by forward substitution, one thread per
  // column (no syncs inside); then the off-diagonal blocks by distance from the diagonal,
  // T_IJ = -T_II sum_{M=J}^{I-1} A_IM T_MJ (6 syncs instead of 63), on tensor cores.
  // Warps 0-1 run the substitution with column j of T_II in registers (fully unrolled: the row
  // loads do not wait on the running sum); meanwhile warps 2-7 store gamma and the decayed K^T's
  // row factors for the scan.
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
  } else if (tid - 64 < C) {
    const int j = tid - 64;
    ws.G[row0 + j] = gam[j];
    ws.F[row0 + j] = rks[j] * dec[j];  // 0 past `valid`
  }
  __syncthreads();
  CLEF_PHASE(3);  // diagonal blocks
  // The off-diagonal blocks by distance from the diagonal, on 3xTF32 tensor cores (both factors are
  // fp32): X_I = sum_{M=J}^{I-1} A_IM T_MJ (k = 16 dist), then T_IJ = -T_II X_I; warp task = block
  // b (I = dist + b) x n8 half nn, X_I through the scratch X.
  {
    const int g = lane / 4, t = lane % 4, b = warp / 2, nn = warp % 2;
#pragma unroll
    for (int dist = 1; dist < 4; ++dist) {
      const int I = dist + b, J = I - dist;
      const bool on = b < 4 - dist;
      if (on) {
        float hh[4] = {}, lh[4] = {}, hl[4] = {};
#pragma unroll
        for (int k0 = 0; k0 < 16 * dist; k0 += 8) {
          const float* a = Am + (16 * I + g) * lda + 16 * J + k0 + t;
          const float* bp = Tm + (16 * J + k0 + t) * lda + 16 * J + 8 * nn + g;
          const float af[4] = {a[0], a[8 * lda], a[4], a[8 * lda + 4]},
                      bf[2] = {bp[0], bp[4 * lda]};
          uint32_t ah[4], al[4], bh[2], bl[2];
          split(af, ah, al);
          split(bf, bh, bl);
          mma3(hh, lh, hl, ah, al, bh, bl);
        }
        float* x = X + b * 256 + g * 16 + 8 * nn + 2 * t;
        x[0] = hh[0] + (lh[0] + hl[0]), x[1] = hh[1] + (lh[1] + hl[1]);
        x[128] = hh[2] + (lh[2] + hl[2]), x[129] = hh[3] + (lh[3] + hl[3]);
      }
      __syncthreads();
      if (on) {
        float hh[4] = {}, lh[4] = {}, hl[4] = {};
#pragma unroll
        for (int k0 = 0; k0 < 16; k0 += 8) {
          const float* a = Tm + (16 * I + g) * lda + 16 * I + k0 + t;
          const float* bp = X + b * 256 + (k0 + t) * 16 + 8 * nn + g;
          const float af[4] = {a[0], a[8 * lda], a[4], a[8 * lda + 4]}, bf[2] = {bp[0], bp[64]};
          uint32_t ah[4], al[4], bh[2], bl[2];
          split(af, ah, al);
          split(bf, bh, bl);
          mma3(hh, lh, hl, ah, al, bh, bl);
        }
        float* o = Tm + (16 * I + g) * lda + 16 * J + 8 * nn + 2 * t;
        o[0] = -(hh[0] + (lh[0] + hl[0])), o[1] = -(hh[1] + (lh[1] + hl[1]));
        o[8 * lda] = -(hh[2] + (lh[2] + hl[2])), o[8 * lda + 1] = -(hh[3] + (lh[3] + hl[3]));
      }
      __syncthreads();
    }
  }
  CLEF_PHASE(4);  // off-diagonal blocks
  if constexpr (kFused) {
    // Xq over Am (dead since the inverse) and rq over W's column factors while T' is stored.
    bf16* Xq = Xv;
    copy_x_tile_async<kThreads>(Xq, xq + (static_cast<size_t>(t0) * Hk + kh) * dk,
                                static_cast<size_t>(Hk) * dk, dk, valid);
    if (tid < C) cw[tid] = tid < valid ? rq[static_cast<size_t>(t0 + tid) * Hk + kh] : 0.0f;
    float* Tq = ws.W + row0 * dk;
    float* Pq = Tq + C * C;
    for (int e = tid; e < C * C; e += kThreads) {
      const int i = e / C, j = e % C;
      Tq[e] = j <= i ? Tm[i * lda + j] * bet[j] : 0.0f;
    }
    cp_async_wait<0>();
    __syncthreads();
    // Tiles above the diagonal blocks are not emitted; the fused kernel never reads them.
    lower_xyt(Xq, Xk, dk, warp, lane, [&](int i, int j, float xx) {
      Pq[i * C + j] = i >= j ? xx * cw[i] * rks[j] * __expf(gam[i] - gam[j]) : 0.0f;
    });
    return;
  }
  // W = Tm diag(beta e^gamma rk) Xk, U = Tm diag(beta) Xv; Xv arrives over Am while W is formed.
  copy_x_tile_async<kThreads>(Xv, xv + (static_cast<size_t>(t0) * Hv + h) * dv,
                              static_cast<size_t>(Hv) * dv, dv, valid);
  lower_times<true>(Tm, lda, cw, Xk, dk, ws.W + row0 * dk, dk, warp, lane);
  CLEF_PHASE(5);  // W (warp 0)
  cp_async_wait<0>();
  __syncthreads();
  lower_times<false>(Tm, lda, bet, Xv, dv, ws.U + row0 * dv, dv, warp, lane);
  CLEF_PHASE(6);  // U (warp 0)
}

// ---- scan: grid (dv / (8 NT), Hv, sequences), sequential over chunks, warp-specialised so that
// each warp keeps only its own operands in registers:
//   state warps (4..7): hold S [dk][8 NT] in fp32 m16n8 accumulators (warp s: row tiles s, s + 4),
//     publish it per chunk (shared, split into two bf16 terms, and global), then
//     S = e^{gamma_C} S + Xk^T (diag(F) Vn), Xk exact bf16 (A by ldmatrix.trans from the warp's own
//     cp.async copy), diag(F) Vn in two terms;
//   value warps (0..3): Vn = U - W S for chunk rows 16 w .. +15, W as prep's hi / lo A fragments
//     (w_frag, fetched a chunk ahead into registers), S in two terms: three bf16 products a k16
//     step (the lo x lo term, ~2^-17 relative, left out), fp32 sums; Vn to global memory and
//     diag(F) Vn split to shared.
// Every shared operand is bf16 [k][n] rows kScanLd apart, read by ldmatrix.trans; kScanLd = 8 NT +
// 8 is an odd number of 16-byte units, so the 8 rows of one 8x8 matrix hit 8 different 4-bank
// groups.
template <int NT>
constexpr int scan_ld() {
  return 8 * NT + 8;
}
// kOut (the scan that also forms o, scan_outputs): the published state in kStates buffers (the
// state before chunk c in buffer c % 4: the output warps read it up to two steps behind the
// recurrence), plus Vn itself (not diag(F) Vn; in bf16) in two slots, and the output warps' own
// copies of each chunk's queries, keys and row factors in two slots (186.5 KiB at NT = 4).
// kWg (scan_wgmma): the state's and diag(F) Vn's terms in wgmma's no-swizzle canonical layout
// (8 x 8 core matrices, ScanSmem::at) instead of padded rows; nothing else changes.
template <int NT, bool kOut = false, bool kWg = false>
struct ScanSmem {
  static_assert(!(kOut && kWg), "the in-scan output reads the padded rows");
  static constexpr int kLd = kWg ? 8 * NT : scan_ld<NT>();  // elements a row of a term's tile
  static constexpr int kStates = kOut ? 4 : 1;
  static constexpr int kState = 2 * kMaxHeadDim * kLd;  // bf16 per buffer: hi, then lo
  bf16* Sh;       // [kStates][hi, lo][kMaxHeadDim][scan_ld] the published state's two terms
  bf16 *Vh, *Vl;  // [C][scan_ld] diag(F) Vn's two terms
  bf16* Xk;       // [C][kLdx] the chunk's keys (each state warp copies its own columns)
  bf16* Vp;       // kOut: [2 slots][C][scan_ld] Vn in bf16
  bf16* Oq;       // kOut: [2 slots][Xq, Xk][C][kLdx] the output warps' tiles
  float* Ov;      // kOut: [2 slots][rq, rk, gamma][C]
  __device__ explicit ScanSmem(void* p) {
    Sh = static_cast<bf16*>(p);
    Vh = Sh + kStates * kState;
    Vl = Vh + C * kLd;
    Xk = Vl + C * kLd;
    Vp = Xk + C * kLdx;
    Oq = Vp + (kOut ? 2 * C * scan_ld<NT>() : 0);
    Ov = reinterpret_cast<float*>(Oq + (kOut ? 4 * C * kLdx : 0));
  }
  // The hi term of state buffer b (its lo term follows kMaxHeadDim rows later: kMaxHeadDim kLd
  // elements in either layout).
  __device__ bf16* state(int b) const { return Sh + (kOut ? b : 0) * kState; }
  // Element (r, c) of a term's tile (the state's [kMaxHeadDim][8 NT], diag(F) Vn's [C][8 NT]).
  __device__ static int at(int r, int c) {
    if constexpr (kWg)
      return ((r >> 3) * NT + (c >> 3)) * 64 + (r & 7) * 8 + (c & 7);
    else
      return r * kLd + c;
  }
  static constexpr size_t bytes() {
    return sizeof(bf16) * (kStates * kState + 2 * C * kLd + C * kLdx +
                           (kOut ? 2 * C * scan_ld<NT>() + 4 * C * kLdx : 0)) +
           (kOut ? sizeof(float) * 6 * C : 0);
  }
};

// Named barriers between the two warp roles (256 threads each: 128 arrive, 128 wait). The state is
// published in two halves (rows 0..63, then 64..127) so that the value warps start on the first
// half while the state warps still update the second.
// kOut: value warps and output warps hand Vn's slot s back and forth on kBarFull + s (Vn of the
// chunk and its state are in shared memory) and kBarEmpty + s (the output warps are done with
// them); one pair of barriers per slot, so neither side can arrive twice on one barrier before the
// other has waited. The output warps alone sync on kBarOut (128 threads).
// The chain's lo terms (ScanLaunch::lo): W's in Vn = U - W S, the published state's there, and
// diag(F) Vn's in the state update (each dropped only by the precision switches of gdn.h).
constexpr int kLoW = 1, kLoS = 2, kLoV = 4;
constexpr int kBarTop = 1, kBarBottom = 2, kBarVn = 3, kBarFull = 4, kBarEmpty = 6, kBarOut = 8;
__device__ __forceinline__ void bar_arrive(int id) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "n"(kScanThreads) : "memory");
}
__device__ __forceinline__ void bar_wait(int id) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(kScanThreads) : "memory");
}
__device__ __forceinline__ void bar_outputs() {
  asm volatile("bar.sync %0, %1;" ::"n"(kBarOut), "n"(kScanOutThreads - kScanThreads) : "memory");
}

// (x0, x1) split into two bf16 terms at element `off` of the two planes.
__device__ __forceinline__ void put_terms(bf16* hi, bf16* lo, int off, float x0, float x1) {
  uint32_t p[2];
  split_pair(x0, x1, p);
  *reinterpret_cast<uint32_t*>(hi + off) = p[0];
  *reinterpret_cast<uint32_t*>(lo + off) = p[1];
}

#ifdef CLEF_WGMMA_AVAILABLE
// The wgmma scan's products (kWg, scan_wgmma): D[64 x 8 NT] += A[64 x 16] B[16 x 8 NT], A an
// m16n8k16 A fragment a warp (registers), B MN-major in shared memory (ScanSmem::at's layout) from
// `b`, the k16 step's first row: 8 rows down 16 x 8 NT bytes, one core matrix across 128.
template <int NT>
__device__ __forceinline__ void wg_product(float (&d)[4 * NT], const uint32_t (&a)[4],
                                           const bf16* b) {
  const uint64_t desc = hopper::smem_desc(b, 16 * 8 * NT, 128);
  if constexpr (NT == 8)
    wgmma::rs_m64n64k16(d, a, desc, 1);
  else
    wgmma::rs_m64n32k16(d, a, desc, 1);
}
#endif
// x *= f, every accumulator of a warp's m16 tile (the state's decay e^{gamma_C}).
template <int NT>
__device__ __forceinline__ void scale_tile(float (&x)[NT][4], float f) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) x[n][i] *= f;
}
// The m16n8 accumulators [NT][4] of a warp as the flat array a wgmma names.
template <int NT>
__device__ __forceinline__ float (&flat(float (&x)[NT][4]))[4 * NT] {
  return reinterpret_cast<float(&)[4 * NT]>(x);
}

// Vn = U - W S for chunk rows 16 warp .. +15 (value warps 0..3). kOut: Vn also to its shared
// slot for the output warps instead of to global memory. kBlocks (unused in the body): one
// instantiation per scan_kernel occupancy, so this __noinline__ role is register-allocated under
// that kernel's limit.
// kWg: W S by warpgroup MMAs (the four value warps are one warpgroup; dk = kMaxHeadDim).
template <int NT, bool kOut, int kBlocks, bool kWg>
__device__ __forceinline__ void scan_values_body(int Tc, int dk, int dv, const Ws& ws, int h,
                                                 int c0, int warp, int lane, int first, int nC,
                                                 int kgs, int lo, bool prefetch, int* progress,
                                                 ScanSmem<NT, kOut, kWg> sm) {
  using SM = ScanSmem<NT, kOut, kWg>;
  const bool w_lo = lo & kLoW, s_lo = lo & kLoS;
  constexpr int ld = scan_ld<NT>();
  const int g = lane / 4, t = lane % 4;
  const size_t r0 = static_cast<size_t>(h) * Tc + static_cast<size_t>(first) * C;
  const uint4* Wp = reinterpret_cast<const uint4*>(ws.W + r0 * dk) + w_frag(warp, 0, kgs, lane);
  const size_t w_chunk = static_cast<size_t>(C) * dk / 4;  // uint4 per chunk slot
  const float* Up = ws.U + r0 * dv + (16 * warp + g) * dv + c0 + 2 * t;
  const float* Fp = ws.F + r0 + 16 * warp + g;
  // Vn's bf16 copy for the output kernel: k16 step `warp` (these chunk rows), this CTA's columns
  [[maybe_unused]] uint4* Vp = ws.Vn + (r0 / C) * (C * dv / 8) + b_frag(warp, c0 / 16, dv, lane);
  uint4 wa[kMaxHeadDim / 16][2] = {};  // W's hi, lo A fragments (lo only where w_lo)
  float2 ua[2][NT];
  float fa[2];
  auto load = [&](int chunk) {
    const uint4* w = Wp + chunk * w_chunk;
#pragma unroll
    for (int kg = 0; kg < kMaxHeadDim / 16; ++kg)
      if (kWg || kg < kgs) {  // kWg: dk = 128 and both terms, with no branch (ptxas would
        wa[kg][0] = __ldg(w + 64 * kg);  // serialise the wgmmas reading registers defined in one)
        if (kWg || w_lo) wa[kg][1] = __ldg(w + 64 * kg + 1);
      }
    const float* u = Up + static_cast<size_t>(chunk) * C * dv;
#pragma unroll
    for (int n = 0; n < NT; ++n) ua[0][n] = ldg2(u + 8 * n), ua[1][n] = ldg2(u + 8 * dv + 8 * n);
    fa[0] = __ldg(Fp + chunk * C), fa[1] = __ldg(Fp + chunk * C + 8);
  };
  // Chunk c's W slot and U rows (every column) into L2 while its register loads are still a step
  // away (one request each, by one lane; the other column CTAs of the head ask for the same).
  auto ask_l2 = [&](int c) {
    if (!prefetch || c >= nC || warp != 0 || lane != 0) return;
    const size_t rows = r0 + static_cast<size_t>(c) * C;
    prefetch_l2(ws.W + rows * dk, static_cast<unsigned>(C * dk * sizeof(float)));
    prefetch_l2(ws.U + rows * dv, static_cast<unsigned>(C * dv * sizeof(float)));
  };
  load(0);
  ask_l2(1);
  CLEF_PHASE_CLOCK(16, 2, nC, 0);
  for (int chunk = 0; chunk < nC; ++chunk) {
    float hh[NT][4] = {}, cr[NT][4] = {};  // W S = hh + cr (the hi x hi products, the others)
    const bf16* Sh = sm.state(chunk % SM::kStates);
    const bf16* Sl = Sh + kMaxHeadDim * SM::kLd;
    if constexpr (kWg) {
#ifdef CLEF_WGMMA_AVAILABLE
      // Rows 0..63 of S once the top half is published, 64..127 once the bottom half is: the
      // same three products a k16 step as below (hi x hi into hh, the cross terms into cr).
      hopper::fence_regs(flat(hh));  // the zeros stay ahead of the fence
      hopper::fence_regs(flat(cr));
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        bar_wait(half == 0 ? kBarTop : kBarBottom);
        hopper::wgmma_fence();
#pragma unroll
        for (int kg = 4 * half; kg < 4 * half + 4; ++kg) {
          const uint32_t(&ah)[4] = reinterpret_cast<const uint32_t(&)[4]>(wa[kg][0]);
          const uint32_t(&al)[4] = reinterpret_cast<const uint32_t(&)[4]>(wa[kg][1]);
          wg_product<NT>(flat(hh), ah, Sh + 16 * kg * 8 * NT);  // every lo term (no branch
          wg_product<NT>(flat(cr), al, Sh + 16 * kg * 8 * NT);  // between wgmmas: ptxas would
          wg_product<NT>(flat(cr), ah, Sl + 16 * kg * 8 * NT);  // fence each one)
        }
        hopper::wgmma_commit();
      }
      hopper::wgmma_wait<0>();
      hopper::fence_regs(flat(hh));
      hopper::fence_regs(flat(cr));
#else
      __trap();  // sm_90a only (scan_wgmma_supported)
#endif
    } else {
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
        const uint32_t ah[4] = {wa[kg][0].x, wa[kg][0].y, wa[kg][0].z, wa[kg][0].w};
        const uint32_t al[4] = {wa[kg][1].x, wa[kg][1].y, wa[kg][1].z, wa[kg][1].w};
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          uint32_t bh[4], bl[4];
          const int off = b_pair_offset(16 * kg, np, ld, lane);
          ldmatrix_x4_trans(bh, Sh + off);
          if (s_lo) ldmatrix_x4_trans(bl, Sl + off);
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int n = 2 * np + q;
            mma_bf16(hh[n], ah, bh[2 * q], bh[2 * q + 1]);
            if (w_lo) mma_bf16(cr[n], al, bh[2 * q], bh[2 * q + 1]);
            if (s_lo) mma_bf16(cr[n], ah, bl[2 * q], bl[2 * q + 1]);
          }
        }
      }
    }
    CLEF_PHASE(4);  // value: second half
    const int r = 16 * warp + g;
    float2 vn[2][NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      vn[0][n] =
          make_float2(ua[0][n].x - (hh[n][0] + cr[n][0]), ua[0][n].y - (hh[n][1] + cr[n][1]));
      vn[1][n] =
          make_float2(ua[1][n].x - (hh[n][2] + cr[n][2]), ua[1][n].y - (hh[n][3] + cr[n][3]));
      put_terms(sm.Vh, sm.Vl, SM::at(r, 8 * n + 2 * t), fa[0] * vn[0][n].x, fa[0] * vn[0][n].y);
      put_terms(sm.Vh, sm.Vl, SM::at(r + 8, 8 * n + 2 * t), fa[1] * vn[1][n].x, fa[1] * vn[1][n].y);
    }
    CLEF_PHASE(5);  // value: Vn to shared
#ifdef CLEF_WGMMA_AVAILABLE
    if constexpr (kWg) hopper::fence_proxy_async();  // the terms visible to the state's wgmmas
#endif
    bar_arrive(kBarVn);
    if constexpr (kOut) {
      // The next chunk's operands first (the chain's), then Vn for the output warps in slot
      // chunk % 2, once they are done with the chunk two back that used it.
      if (chunk + 1 < nC) load(chunk + 1);
      ask_l2(chunk + 2);
      const int slot = chunk % 2;
      if (chunk >= 2) bar_wait(kBarEmpty + slot);
      bf16* vh = sm.Vp + slot * C * ld;
#pragma unroll
      for (int n = 0; n < NT; ++n) {  // bf16, as the output kernel reads Vn
        *reinterpret_cast<uint32_t*>(vh + r * ld + 8 * n + 2 * t) =
            pack_bf16(vn[0][n].x, vn[0][n].y);
        *reinterpret_cast<uint32_t*>(vh + (r + 8) * ld + 8 * n + 2 * t) =
            pack_bf16(vn[1][n].x, vn[1][n].y);
      }
      bar_arrive(kBarFull + slot);
      CLEF_PHASE(6);  // value: next loads issued, Vn to the output warps' slot
    } else {
      // Vn's global copy (the output kernel's) and the next chunk's operands only now: issuing
      // them stalls while the memory system is busy, and that must not delay the hand-off.
      uint4* vp = Vp + static_cast<size_t>(chunk) * (C * dv / 8);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        const float a[4] = {vn[0][2 * np].x, vn[0][2 * np].y, vn[1][2 * np].x, vn[1][2 * np].y};
        const float b[4] = {vn[0][2 * np + 1].x, vn[0][2 * np + 1].y, vn[1][2 * np + 1].x,
                            vn[1][2 * np + 1].y};
        vp[32 * np] = acc_b_frag(a, b);
      }
      CLEF_PHASE(6);  // value: Vn's global copy
      if constexpr (kWg)
        load(chunk + 1 < nC ? chunk + 1 : chunk);  // no branch around the A registers' loads
      else if (chunk + 1 < nC)
        load(chunk + 1);
      ask_l2(chunk + 2);
      // The CTA's count, by value warp 0 two chunks behind, with no fence of its own on the
      // chain: this warp's Vn stores precede the release; the other value warps' Vn of chunk
      // c - 2 preceded their kBarVn arrival of chunk c - 1, and the state warps' published states
      // up to chunk c - 1 their kBarTop arrival of chunk c, both synchronised with by this warp
      // (kBarVn -> state warps -> kBarTop). The kernel releases nC at its end.
      if (progress && warp == 0 && chunk >= 2) {
        __syncwarp();
        if (lane == 0) release_progress(progress, chunk - 1);
      }
    }
  }
  if constexpr (kOut) {
    // The last two chunks' hand-backs, so that every arrival on a barrier is matched.
    for (int c = nC < 2 ? 0 : nC - 2; c < nC; ++c) bar_wait(kBarEmpty + c % 2);
  }
}

// S = e^{gamma_C} S + Xk^T diag(F) Vn, published per chunk in two halves (state warps 4..7; half
// mi holds the m16 row tiles sw + 4 mi). kOut: the state before chunk c to shared buffer c % 4
// only (the output warps read it there; no global copy). kBlocks: as scan_values.
// kWg: the update by warpgroup MMAs (the four state warps are one warpgroup: its m64 tile mi is
// half mi, warp sw's rows 16 sw + 64 mi .. as here), each half's terms published as its group
// of products completes.
template <int NT, bool kOut, int kBlocks, bool kWg>
__device__ __forceinline__ void scan_states_body(const bf16* __restrict__ xk, const ChunkMap& map,
                                                 int Hk, int Hv, int Tc, int dk, int dv,
                                                 const Ws& ws, int h, int c0, int warp, int lane,
                                                 int first, int nC, int kgs, int lo,
                                                 ScanSmem<NT, kOut, kWg> sm) {
  using SM = ScanSmem<NT, kOut, kWg>;
  constexpr int ld = scan_ld<NT>();
  const bool v_lo = lo & kLoV;
  const int sw = warp - 4, g = lane / 4, t = lane % 4, kh = h / (Hv / Hk);
  // this sequence's slots [first, first + nC) of the Tc / C in the scratch
  const size_t slot0 = static_cast<size_t>(h) * (Tc / C) + first;
  const float* Gh = ws.G + static_cast<size_t>(h) * Tc + static_cast<size_t>(first) * C;
  uint4* Hp = ws.H + slot0 * (dk * dv / 8);  // the published states (bf16, b_frag)
  float s[2][NT][4] = {};
  // The 64 rows x 2 x 16 columns of Xk this warp's row tiles read, by cp.async (only chunks that
  // update the state, all 64 rows valid: chunks never straddle, only a sequence's last is short).
  auto load = [&](int chunk) {
    int t0, valid;
    map.chunk(first + chunk, t0, valid);
    const bf16* src = xk + (static_cast<size_t>(t0) * Hk + kh) * dk;
    for (int e = lane; e < C * 4; e += 32) {
      const int j = e / 4, mt = sw + 4 * ((e / 2) % 2), d = 16 * mt + 8 * (e % 2);
      if (mt < kgs)
        cp_async16(sm.Xk + j * kLdx + d, src + static_cast<size_t>(j) * Hk * dk + d, 16);
    }
    cp_async_commit();
  };
  // Half mi of the state before `chunk`: to shared (two terms) for the value warps, then (after the
  // hand-off, off the chain) to the published states the output kernel reads.
  auto publish = [&](int chunk, int mi, bool global) {
    const int mt = sw + 4 * mi;
    if (mt >= kgs || (kOut && global)) return;
    const int d = 16 * mt + g;
    if (global) {  // k16 step mt of the output kernel's Xq S
      uint4* hp = Hp + static_cast<size_t>(chunk) * (dk * dv / 8) + b_frag(mt, c0 / 16, dv, lane);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np)
        hp[32 * np] = acc_b_frag(s[mi][2 * np], s[mi][2 * np + 1]);
      return;
    }
    bf16* sh = sm.state(chunk % SM::kStates);
    bf16* sl = sh + kMaxHeadDim * SM::kLd;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int col = 8 * n + 2 * t;
      put_terms(sh, sl, SM::at(d, col), s[mi][n][0], s[mi][n][1]);
      put_terms(sh, sl, SM::at(d + 8, col), s[mi][n][2], s[mi][n][3]);
    }
#ifdef CLEF_WGMMA_AVAILABLE
    if constexpr (kWg) hopper::fence_proxy_async();  // visible to the value warps' wgmmas
#endif
  };
  if (nC > 1) load(0);
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {  // S_0 = 0
    publish(0, mi, false);
    bar_arrive(mi == 0 ? kBarTop : kBarBottom);
    publish(0, mi, true);
  }
  // gamma_C of the chunk, a step ahead: its load must not sit between Vn's arrival and the update
  float gl = __ldg(Gh + C - 1);
  CLEF_PHASE_CLOCK(23, 2, 0, 128);
  for (int chunk = 0; chunk < nC; ++chunk) {
    const float egl = __expf(gl);
    if (chunk + 1 < nC) gl = __ldg(Gh + static_cast<size_t>(chunk + 1) * C + C - 1);
    CLEF_PHASE(0);     // state: second half's publish + next keys (previous step)
    bar_wait(kBarVn);  // Vn of this chunk ready (and every read of the published halves done)
    CLEF_PHASE(1);     // state: wait for Vn
    if (chunk + 1 == nC) break;  // the state after the last chunk is not needed
    cp_async_wait<0>();          // this warp's keys of the chunk
    __syncwarp();
    if constexpr (kWg) {
#ifdef CLEF_WGMMA_AVAILABLE
      // Every A fragment of Xk^T first (a wgmma reads its registers until it completes), then
      // half 0's products and half 1's as two groups: half 0 is published while half 1 runs.
      uint32_t xa[2][C / 16][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int kg = 0; kg < C / 16; ++kg)
          xk_t_frag(xa[mi][kg], sm.Xk, kLdx, kg, sw + 4 * mi, lane);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        scale_tile(s[mi], egl);
        hopper::fence_regs(flat(s[mi]));  // the scaling stays ahead of the fence
      }
      hopper::wgmma_fence();
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int kg = 0; kg < C / 16; ++kg) {
          wg_product<NT>(flat(s[mi]), xa[mi][kg], sm.Vh + 16 * kg * 8 * NT);
          wg_product<NT>(flat(s[mi]), xa[mi][kg], sm.Vl + 16 * kg * 8 * NT);
        }
        hopper::wgmma_commit();
      }
      hopper::wgmma_wait<1>();
      hopper::fence_regs(flat(s[0]));
      publish(chunk + 1, 0, false);
      bar_arrive(kBarTop);
      publish(chunk + 1, 0, true);
      hopper::wgmma_wait<0>();
      hopper::fence_regs(flat(s[1]));
      publish(chunk + 1, 1, false);
      bar_arrive(kBarBottom);
      publish(chunk + 1, 1, true);
#else
      __trap();  // sm_90a only (scan_wgmma_supported)
#endif
    } else {
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int mt = sw + 4 * mi;
        if (mt < kgs) {
          scale_tile(s[mi], egl);
#pragma unroll
          for (int kg = 0; kg < C / 16; ++kg) {
            uint32_t a[4];
            xk_t_frag(a, sm.Xk, kLdx, kg, mt, lane);
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
              uint32_t bh[4], bl[4];
              const int off = b_pair_offset(16 * kg, np, ld, lane);
              ldmatrix_x4_trans(bh, sm.Vh + off);
              if (v_lo) ldmatrix_x4_trans(bl, sm.Vl + off);
#pragma unroll
              for (int q = 0; q < 2; ++q) {
                mma_bf16(s[mi][2 * np + q], a, bh[2 * q], bh[2 * q + 1]);
                if (v_lo) mma_bf16(s[mi][2 * np + q], a, bl[2 * q], bl[2 * q + 1]);
              }
            }
          }
          CLEF_PHASE(mi == 0 ? 2 : 4);  // state: update half mi
          publish(chunk + 1, mi, false);
        }
        bar_arrive(mi == 0 ? kBarTop : kBarBottom);
        publish(chunk + 1, mi, true);
        if (mi == 0) CLEF_PHASE(3);  // state: first half's publish
      }
    }
    // The next chunk's keys over these: every ldmatrix of them fed the products published above.
    if (chunk + 2 < nC) load(chunk + 1);
  }
}

// 4-byte async copy (the row factors, one float a row Hk apart); src_bytes 0 zero-fills.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}

// acc[n] += A B over the k16 step at row k0 of B, the output kernel's products in its order: A in
// registers as its hi term (and lo term when kTwoA), B bf16 in a shared [k][n] tile (row stride
// scan_ld; the hi term of the published state): hi x B (then lo x B) per n8 tile.
template <int NT, bool kTwoA>
__device__ __forceinline__ void times_terms(float (&acc)[NT][4], const uint32_t (&ah)[4],
                                            const uint32_t (&al)[4], const bf16* B, int k0,
                                            int lane) {
#pragma unroll
  for (int np = 0; np < NT / 2; ++np) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, B + b_pair_offset(k0, np, scan_ld<NT>(), lane));
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      float(&d)[4] = acc[2 * np + q];
      mma_bf16(d, ah, b[2 * q], b[2 * q + 1]);
      if (kTwoA) mma_bf16(d, al, b[2 * q], b[2 * q + 1]);
    }
  }
}

// acc[n] += A B over the k16 step at row k0 of B, B in two bf16 terms (Bh, Bl: shared [k][n] tiles,
// row stride scan_ld): per n8 tile A's hi term by Bh, then by Bl, then (kTwoA) A's lo term by Bh
// (the fused core's two-term products, in its order).
template <int NT, bool kTwoA>
__device__ __forceinline__ void times_two_terms(float (&acc)[NT][4], const uint32_t (&ah)[4],
                                                const uint32_t (&al)[4], const bf16* Bh,
                                                const bf16* Bl, int k0, int lane) {
#pragma unroll
  for (int np = 0; np < NT / 2; ++np) {
    uint32_t bh[4], bl[4];
    const int off = b_pair_offset(k0, np, scan_ld<NT>(), lane);
    ldmatrix_x4_trans(bh, Bh + off);
    ldmatrix_x4_trans(bl, Bl + off);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      float(&d)[4] = acc[2 * np + q];
      mma_bf16(d, ah, bh[2 * q], bh[2 * q + 1]);
      mma_bf16(d, ah, bl[2 * q], bl[2 * q + 1]);
      if (kTwoA) mma_bf16(d, al, bh[2 * q], bh[2 * q + 1]);
    }
  }
}

// The in-scan output's operands beyond the scan's (o set: kOut).
struct ScanOutArgs {
  const bf16* xq = nullptr;
  const float* rq = nullptr;
  const float* rk = nullptr;
  bf16* o = nullptr;  // [T, Hv, dv]
};
// The scan's outputs (kOut, output warps 8..11, warp ow owns chunk rows 16 ow .. +15 of the CTA's
// 8 NT columns), a chunk behind the recurrence:
//   O = diag(e^gamma rq) (Xq S) + P Vn,  P = (Xq Xk^T) o (rq rk Gamma) (lower triangle),
// S and Vn from the shared buffers the value and state warps fill, Xq, Xk, rq, rk, gamma by
// cp.async into the warps' own slots a chunk ahead. Every product, split and rounding is the
// output kernel's in the same order (P's tiles as lower_xyt, S and Vn in bf16, the same products
// a k16 step), so o is bit for bit what the output kernel writes; P stays in
// registers (its m16n8 accumulators are the A fragments of P Vn).
template <int NT>
__device__ __noinline__ void scan_outputs(const bf16* __restrict__ xk, const ChunkMap& map, int Hk,
                                          int Hv, int Tc, int dk, int dv, const Ws& ws, int h,
                                          int c0, int ow, int lane, int first, int nC, int kgs,
                                          ScanSmem<NT, true> sm, ScanOutArgs oa) {
  constexpr int ld = scan_ld<NT>();
  const int g = lane / 4, t = lane % 4, kh = h / (Hv / Hk), otid = 32 * ow + lane;
  const float* Gh = ws.G + static_cast<size_t>(h) * Tc + static_cast<size_t>(first) * C;
  auto xq_frag = [&](const bf16* Xq, int kg, uint32_t(&a)[4]) {  // row tile ow, k16 step kg
    ldmatrix_x4(a, Xq + (16 * ow + lane % 16) * kLdx + 16 * kg + 8 * (lane / 16));
  };
  auto load = [&](int chunk) {  // into slot chunk % 2, one cp.async group
    int t0, valid;
    map.chunk(first + chunk, t0, valid);
    bf16* dq = sm.Oq + (chunk % 2) * 2 * C * kLdx;
    bf16* dk_ = dq + C * kLdx;
    float* v = sm.Ov + (chunk % 2) * 3 * C;
    const size_t stride = static_cast<size_t>(Hk) * dk;
    const bf16* sq = oa.xq + (static_cast<size_t>(t0) * Hk + kh) * dk;
    const bf16* sk = xk + (static_cast<size_t>(t0) * Hk + kh) * dk;
    const int c8 = dk / 8;
    for (int e = otid; e < C * c8; e += 128) {
      const int i = e / c8, c = (e % c8) * 8;
      const bool in = i < valid;
      cp_async16(dq + i * kLdx + c, in ? sq + i * stride + c : sq, in ? 16 : 0);
      cp_async16(dk_ + i * kLdx + c, in ? sk + i * stride + c : sk, in ? 16 : 0);
    }
    if (otid < C) {
      const bool in = otid < valid;
      const size_t f = static_cast<size_t>(in ? t0 + otid : t0) * Hk + kh;
      cp_async4(v + otid, oa.rq + f, in ? 4 : 0);
      cp_async4(v + C + otid, oa.rk + f, in ? 4 : 0);
    } else if (otid < C + C / 4) {  // gamma: defined on all 64 rows of the slot (prep)
      const int i = 4 * (otid - C);
      cp_async16(v + 2 * C + i, Gh + static_cast<size_t>(chunk) * C + i, 16);
    }
    cp_async_commit();
  };
  load(0);
  for (int chunk = 0; chunk < nC; ++chunk) {
    int t0, valid;
    map.chunk(first + chunk, t0, valid);
    const int slot = chunk % 2;
    cp_async_wait<0>();
    bar_outputs();  // the chunk's tiles visible to all four warps, every read of slot 1 - slot done
    if (chunk + 1 < nC) load(chunk + 1);
    const bf16* Xq = sm.Oq + slot * 2 * C * kLdx;
    const bf16* Xk = Xq + C * kLdx;
    const float* rqs = sm.Ov + slot * 3 * C;
    const float* rks = rqs + C;
    const float* gam = rks + C;
    // P's row tile ow: n8 tiles 0 .. 2 ow + 1, exact products, fp32 sums (lower_xyt's order)
    float p[8][4] = {};
    for (int kg = 0; kg < kgs; ++kg) {
      uint32_t a[4];
      xq_frag(Xq, kg, a);
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) {
        if (jp > ow) break;
        uint32_t b[4];
        ldmatrix_x4(
            b, Xk + (16 * jp + lane % 8 + 8 * (lane / 16)) * kLdx + 16 * kg + 8 * ((lane / 8) % 2));
        mma_bf16(p[2 * jp], a, b[0], b[1]);
        mma_bf16(p[2 * jp + 1], a, b[2], b[3]);
      }
    }
    // (Xq Xk^T)_ij rq_i rk_j e^{gamma_i - gamma_j} (i >= j), as A fragments in two bf16 terms
    uint32_t pa[4][2][4];
    const int i0 = 16 * ow + g;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      if (kk > ow) break;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int n = 2 * kk + half;
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int i = i0 + 8 * hr, j = 8 * n + 2 * t;
          auto pv = [&](int jj, float xx) {
            return i >= jj ? (xx * rqs[i] * rks[jj]) * __expf(gam[i] - gam[jj]) : 0.0f;
          };
          uint32_t terms[2];
          split_pair(pv(j, p[n][2 * hr]), pv(j + 1, p[n][2 * hr + 1]), terms);
          pa[kk][0][2 * half + hr] = terms[0];
          pa[kk][1][2 * half + hr] = terms[1];
        }
      }
    }
    const float sc0 = __expf(gam[i0]) * rqs[i0], sc1 = __expf(gam[i0 + 8]) * rqs[i0 + 8];
    bar_wait(kBarFull + slot);  // Vn of the chunk in its slot, the state before it in its buffer
    // S's hi term is bf16(S), the output kernel's published state
    const bf16* Sh = sm.state(chunk % ScanSmem<NT, true>::kStates);
    float acc[NT][4] = {};
    for (int kg = 0; kg < kgs; ++kg) {  // Xq S (the output kernel's times_frag_b<false, 1>)
      uint32_t a[4];
      xq_frag(Xq, kg, a);
      times_terms<NT, false>(acc, a, a, Sh, 16 * kg, lane);
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      acc[n][0] *= sc0, acc[n][1] *= sc0;
      acc[n][2] *= sc1, acc[n][3] *= sc1;
    }
    const bf16* Vh = sm.Vp + slot * C * ld;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {  // + P Vn (times_frag_b<true, 2>)
      if (kk > ow) break;
      times_terms<NT, true>(acc, pa[kk][0], pa[kk][1], Vh, 16 * kk, lane);
    }
    bar_arrive(kBarEmpty + slot);  // every read of the slot and of the state buffer is done
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int i = i0 + 8 * hr;
      if (i >= valid) continue;
      bf16* dst = oa.o + (static_cast<size_t>(t0 + i) * Hv + h) * dv + c0 + 2 * t;
#pragma unroll
      for (int n = 0; n < NT; ++n)
        *reinterpret_cast<__nv_bfloat162*>(dst + 8 * n) =
            __floats2bfloat162_rn(acc[n][2 * hr], acc[n][2 * hr + 1]);
    }
  }
}

// The roles as functions of their own (each gets its own register allocation); the wgmma scan's
// are inlined instead (ptxas serialises warpgroup MMAs across a call).
template <int NT, bool kOut, int kBlocks>
__device__ __noinline__ void scan_values(int Tc, int dk, int dv, const Ws& ws, int h, int c0,
                                         int warp, int lane, int first, int nC, int kgs, int lo,
                                         bool prefetch, int* progress,
                                         ScanSmem<NT, kOut, false> sm) {
  scan_values_body<NT, kOut, kBlocks, false>(Tc, dk, dv, ws, h, c0, warp, lane, first, nC, kgs, lo,
                                             prefetch, progress, sm);
}
template <int NT, bool kOut, int kBlocks>
__device__ __noinline__ void scan_states(const bf16* __restrict__ xk, const ChunkMap& map, int Hk,
                                         int Hv, int Tc, int dk, int dv, const Ws& ws, int h,
                                         int c0, int warp, int lane, int first, int nC, int kgs,
                                         int lo, ScanSmem<NT, kOut, false> sm) {
  scan_states_body<NT, kOut, kBlocks, false>(xk, map, Hk, Hv, Tc, dk, dv, ws, h, c0, warp, lane,
                                             first, nC, kgs, lo, sm);
}

// NT = 4: 32 columns; NT = 2 where dv is not a multiple of 32. kBlocks: CTAs an SM (1: the
// registers of one; 2: at most 128 registers a thread, for grids past one wave of SMs, where a
// second CTA's chain fills the first's stalls). kOut: 4 more warps form o from the state and Vn in
// shared memory (scan_outputs). `early`: the next kernel's CTAs may be scheduled beside this
// grid's from its start (the output kernel's P terms meanwhile; only where the grid is one wave,
// so that they take no SM a scan CTA still waits for).
template <int NT, bool kOut, int kBlocks, bool kWg = false>
__global__ void __launch_bounds__(kOut ? kScanOutThreads : kScanThreads, kBlocks)
    scan_kernel(const bf16* __restrict__ xk, ChunkMap map, int Tc, int Hk, int Hv, int dk, int dv,
                Ws ws, ScanOutArgs oa, bool early, int lo, bool longest, bool prefetch,
                bool progress) {
  static_assert(NT % 2 == 0, "B fragments come two n8 tiles at a time");
  extern __shared__ __align__(128) float smem[];
  const ScanSmem<NT, kOut, kWg> sm(smem);
  const int h = blockIdx.y, c0 = blockIdx.x * 8 * NT;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int kgs = dk / 16;
  int first, nC;  // the chunk slots of sequence blockIdx.z; each sequence starts from S = 0
  if (skip_core(map)) return;
  const int seq = longest ? map.longest_first(blockIdx.z, gridDim.z) : blockIdx.z;
  map.sequence(seq, Tc / C, first, nC);
  if (nC <= 0) return;  // an unused sequence slot (the whole CTA leaves before any barrier)
  wait_predecessor();   // prep's W, U, F, G (and the zeroed progress counts)
  if (early) allow_dependents();
  // This column CTA's progress count (kOut publishes nothing to global memory).
  int* const prog =
      progress && !kOut
          ? ws.progress + (static_cast<size_t>(seq) * Hv + h) * kProgressSlots + blockIdx.x
          : nullptr;

  // separate functions: each role gets its own register allocation
  if constexpr (kWg) {
    if (warp < 4)
      scan_values_body<NT, kOut, kBlocks, true>(Tc, dk, dv, ws, h, c0, warp, lane, first, nC, kgs,
                                                lo, prefetch, prog, sm);
    else
      scan_states_body<NT, kOut, kBlocks, true>(xk, map, Hk, Hv, Tc, dk, dv, ws, h, c0, warp, lane,
                                                first, nC, kgs, lo, sm);
  } else if (warp < 4) {
    scan_values<NT, kOut, kBlocks>(Tc, dk, dv, ws, h, c0, warp, lane, first, nC, kgs, lo, prefetch,
                                   prog, sm);
  } else if (warp < 8) {
    scan_states<NT, kOut, kBlocks>(xk, map, Hk, Hv, Tc, dk, dv, ws, h, c0, warp, lane, first, nC,
                                   kgs, lo, sm);
  } else if constexpr (kOut) {
    scan_outputs<NT>(xk, map, Hk, Hv, Tc, dk, dv, ws, h, c0, warp - 8, lane, first, nC, kgs, sm,
                     oa);
  }
  if (prog) {  // every warp's stores of every chunk before the last count
    __syncthreads();
    if (threadIdx.x == 0) release_progress(prog, nC);
  }
}

// ---- output: grid (nC, Hv), kOutThreads (8 warps, three CTAs per SM so that one CTA's loads
// overlap the others' products), bf16 m16n8k16. Shared: gam, sc (e^gamma rq), rqs, rks [C] fp32;
// Xq, Xk [C][kLdx] bf16; Ph, Pl [C][kLdp] bf16, the two terms of P = (Q K^T) o Gamma.
// Warp w owns O columns 16w .. 16w+15 for all 64 rows; its B fragments (S, Vn) come straight from
// global memory in bf16, in the order it reads them (b_frag: one 16-byte load a lane per k16 step;
// each element is read by one warp only):
//   O = diag(e^gamma rq) (Xq S) + P Vn,
// Xq exact, P in two terms (~2^-17), S and Vn rounded to bf16 by the scan (as FLA's h and v_new,
// and FlashInfer's bf16 copies of its fp32 state): O feeds nothing sequential and is itself
// rounded to bf16, while every product on the recurrence (prep, scan) keeps fp32 accuracy.

// acc[r][tm] += A[16 tm.., k] B[k][16 w + 8 r ..] for k in [0, K) (and k < 16 (tm + 1) when
// kLower): A as PA bf16 terms in shared memory (row stride lda, A2 unused when PA == 1), B bf16 in
// fragment order (b: this warp's and lane's uint4 of k16 step 0, b_frag; `step` uint4 per k16
// step); the next k16 step's B is in flight while this one's products run.
// `cg`: B through L2 only (ld.global.cg), for operands a running scan writes
// (ScanLaunch::progress); else through the read-only path.
__device__ __forceinline__ uint4 load_b(const uint4* p, bool cg) {
  return cg ? __ldcg(p) : __ldg(p);
}
template <bool kLower, int PA>
__device__ __forceinline__ void times_frag_b(float (&acc)[2][4][4], const bf16* A1, const bf16* A2,
                                             int lda, const uint4* b, size_t step, int K, int lane,
                                             bool cg) {
  uint4 bv = load_b(b, cg);
  for (int k0 = 0; k0 < K; k0 += 16) {
    const uint4 nv = k0 + 16 < K ? load_b(b + (k0 / 16 + 1) * step, cg) : bv;
#pragma unroll
    for (int tm = 0; tm < 4; ++tm) {
      if (kLower && k0 >= 16 * (tm + 1)) continue;
      uint32_t a1[4], a2[4];
      const int off = (16 * tm + lane % 16) * lda + k0 + 8 * (lane / 16);
      ldmatrix_x4(a1, A1 + off);
      mma_bf16(acc[0][tm], a1, bv.x, bv.y);
      mma_bf16(acc[1][tm], a1, bv.z, bv.w);
      if (PA == 2) {
        ldmatrix_x4(a2, A2 + off);
        mma_bf16(acc[0][tm], a2, bv.x, bv.y);
        mma_bf16(acc[1][tm], a2, bv.z, bv.w);
      }
    }
    bv = nv;
  }
}

// y at a pair of columns of one row from o (x0, x1, already rounded to bf16), the row's 1 / rms,
// the norm's weights and z (a bf16 pair), at gated_rms_norm's element-wise rounding points.
__device__ __forceinline__ __nv_bfloat162 gated_norm_pair(float x0, float x1, float rs, float2 w,
                                                          uint32_t z) {
  const float n0 = rnd<bf16>(x0 * rs), n1 = rnd<bf16>(x1 * rs);
  const float zw0 = rnd<bf16>(w.x * n0), zw1 = rnd<bf16>(w.y * n1);
  return __floats2bfloat162_rn(zw0 * silu_rounded_to<bf16>(bf16_lo(z)),
                               zw1 * silu_rounded_to<bf16>(bf16_hi(z)));
}

// The gated RMSNorm epilogue (kNorm, GdnGatedNorm), after every warp has stored its O columns,
// rounded to bf16 where the reference materialises o, into Os ([C][kLdx] bf16): warp w normalises
// rows w, w + 8, ... (the sum of squares by shuffles over the row's dv values) and writes y to o
// with gated_rms_norm's element-wise rounding points, a row's pairs contiguous.
__device__ __forceinline__ void gated_norm_rows(const bf16* Os, const GdnGatedNorm& nrm, int t0,
                                                int valid, int h, int Hv, int dv, int warp,
                                                int lane, __nv_bfloat16* __restrict__ o) {
  constexpr int kPairs = kMaxHeadDim / 64;  // bf16 pairs per lane
  float2 w[kPairs];
#pragma unroll
  for (int p = 0; p < kPairs; ++p) {
    const int c = 2 * (lane + 32 * p);
    w[p] = c < dv ? ldg2(nrm.w + c) : make_float2(0.0f, 0.0f);
  }
  for (int i = warp; i < valid; i += kOutThreads / 32) {
    const size_t row = static_cast<size_t>(t0 + i);
    float2 x[kPairs];
    uint32_t z[kPairs];
    float ss = 0.0f;
#pragma unroll
    for (int p = 0; p < kPairs; ++p) {
      const int c = 2 * (lane + 32 * p);
      const bool in = c < dv;
      x[p] = in ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Os + i * kLdx + c))
                : make_float2(0.0f, 0.0f);
      z[p] = in ? __ldg(reinterpret_cast<const unsigned int*>(nrm.z + row * nrm.ldz + h * dv + c))
                : 0u;
      ss += x[p].x * x[p].x + x[p].y * x[p].y;
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, m);
    const float rs = rsqrtf(ss / static_cast<float>(dv) + nrm.eps);
#pragma unroll
    for (int p = 0; p < kPairs; ++p) {
      const int c = 2 * (lane + 32 * p);
      if (c >= dv) continue;
      *reinterpret_cast<__nv_bfloat162*>(o + (row * Hv + h) * dv + c) =
          gated_norm_pair(x[p].x, x[p].y, rs, w[p], z[p]);
    }
  }
}

// 3 CTAs an SM: at 4 (64 registers, 84-136 bytes of spills) it measured slower, 48.6 -> 50.3 us
// at 961 tokens and 190.7 -> 257.2 at 5661 (perf-log v17b).
// NH value heads a CTA (1 or 2, of one key head: Hv / Hk a multiple of NH): they share Xq, Xk and
// the raw Xq Xk^T products, so a pair loads those tiles and runs lower_xyt once (perf-log v18c);
// each head's P = (Xq Xk^T) o (rq rk Gamma_h), O and norm are the single head's, in the same
// operations and order (bit for bit).
template <int NH>
constexpr size_t output_smem() {
  return sizeof(float) * (2 * NH + 2) * C + sizeof(bf16) * (2 * C * kLdx + 2 * NH * C * kLdp);
}

template <typename E, bool kNorm, int NH>
__global__ void __launch_bounds__(kOutThreads, 3)
    output_kernel(const bf16* __restrict__ xq, const bf16* __restrict__ xk,
                  const float* __restrict__ rq, const float* __restrict__ rk, ChunkMap map, int Tc,
                  int Hk, int Hv, int dk, int dv, Ws ws, GdnGatedNorm nrm, E* __restrict__ o,
                  int progress_slots) {
  constexpr int NW = kOutThreads / 32;
  if (skip_core(map)) return;
  extern __shared__ __align__(128) float smem[];
  // progress_slots > 0 (ScanLaunch::progress; the scan's counts a head, one a column CTA): the
  // CTAs take the chunk slots in Ws::order (all value heads of one slot, then the next), each
  // waiting for its own chunk.
  int chunk = blockIdx.x, hb = blockIdx.y, seq = 0;
  if (progress_slots) {
    const int i = blockIdx.y * gridDim.x + blockIdx.x, e = __ldcg(ws.order + i / gridDim.y);
    chunk = e & 0xFFFF, seq = e >> 16, hb = i % gridDim.y;
  }
  const int h0 = hb * NH, kh = h0 / (Hv / Hk), nC = Tc / C;
  int t0, valid;  // the chunk's first input row and rows
  map.chunk(chunk, t0, valid);
  if (valid <= 0) return;
  float* gam = smem;         // [NH][C]
  float* sc = gam + NH * C;  // [NH][C]
  float* rqs = sc + NH * C;
  float* rks = rqs + C;
  bf16* Xq = reinterpret_cast<bf16*>(rks + C);
  bf16* Xk = Xq + C * kLdx;
  bf16* P = Xk + C * kLdx;  // head hh: Ph at P + 2 hh C kLdp, Pl C kLdp after it
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  // Head hh's scratch rows (G, Vn) start at row0(hh).
  auto row0 = [&](int hh) { return static_cast<size_t>(h0 + hh) * Tc + chunk * C; };
  CLEF_PHASE_CLOCK(8, 1, 1, 0);

  load_x_tiles<kOutThreads>(
      Xq, xq + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk, dk, Xk,
      xk + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk, dk, valid);
  if (tid < C) {
    const bool in = tid < valid;
#pragma unroll
    for (int hh = 0; hh < NH; ++hh) gam[hh * C + tid] = ws.G[row0(hh) + tid];
    rqs[tid] = in ? rq[static_cast<size_t>(t0 + tid) * Hk + kh] : 0.0f;
    rks[tid] = in ? rk[static_cast<size_t>(t0 + tid) * Hk + kh] : 0.0f;
  }
  __syncthreads();
  CLEF_PHASE(0);  // loads
  if (tid < C) {
#pragma unroll
    for (int hh = 0; hh < NH; ++hh) sc[hh * C + tid] = __expf(gam[hh * C + tid]) * rqs[tid];
  }
  // P = (Q K^T) o Gamma_incl = (diag(rq) Xq Xk^T diag(rk)) o Gamma_incl, lower-triangle tiles as
  // in xkt_slot (the product reads no tile above the diagonal blocks).
  static_assert(NW == 8, "xkt_slot spreads the tiles over 8 warps");
  lower_xyt(Xq, Xk, dk, warp, lane, [&](int i, int j, float xx) {
    const float xr = xx * rqs[i] * rks[j];
#pragma unroll
    for (int hh = 0; hh < NH; ++hh) {
      const float* gh = gam + hh * C;
      const float p = i >= j ? xr * __expf(gh[i] - gh[j]) : 0.0f;
      const bf16 hi = __float2bfloat16_rn(p);
      bf16* Ph = P + 2 * hh * C * kLdp;
      Ph[i * kLdp + j] = hi;
      Ph[C * kLdp + i * kLdp + j] = __float2bfloat16_rn(p - __bfloat162float(hi));
    }
  });
  __syncthreads();
  CLEF_PHASE(1);  // P
  const int col0 = 16 * warp;
  const bool on = col0 < dv;  // dv % 16 == 0: a warp has both column tiles or none
  // Everything above reads the conv prep's and prep's outputs only (G: prep's, complete before
  // the scan could let this grid start); the published states and Vn are the scan's: all of them,
  // or (progress_slots) this chunk's, which the scan has published once every count of the
  // sequence's heads h0.. has passed the chunk's index in the sequence.
  if (progress_slots) {
    if (warp == 0) {
      int first, n;
      map.sequence(seq, nC, first, n);
      const int need = chunk - first + 1;
      for (int i = lane; i < NH * progress_slots; i += 32) {
        const int* p = ws.progress +
                       (static_cast<size_t>(seq) * Hv + h0 + i / progress_slots) * kProgressSlots +
                       i % progress_slots;
        while (acquire_progress(p) < need) __nanosleep(128);
      }
    }
    __syncthreads();
  } else {
    wait_predecessor();
  }
  if (!kNorm && !on) return;  // the norm's barriers need every warp
  for (int hh = 0; hh < NH; ++hh) {
    const int h = h0 + hh;
    bf16* const Ph = P + 2 * hh * C * kLdp;
    float acc[2][4][4] = {};
    const size_t step = static_cast<size_t>(dv / 16) * 32;  // uint4 per k16 step
    if (on) {
      times_frag_b<false, 1>(
          acc, Xq, nullptr, kLdx,
          ws.H + (static_cast<size_t>(h) * nC + chunk) * (dk * dv / 8) + b_frag(0, warp, dv, lane),
          step, dk, lane, progress_slots != 0);
      CLEF_PHASE(3);  // Xq S (warp 0)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int tm = 0; tm < 4; ++tm)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[r][tm][c] *= sc[hh * C + 16 * tm + g + 8 * (c / 2)];
      times_frag_b<true, 2>(acc, Ph, Ph + C * kLdp, kLdp,
                            ws.Vn + row0(hh) / C * (C * dv / 8) + b_frag(0, warp, dv, lane), step,
                            C, lane, progress_slots != 0);
      CLEF_PHASE(4);  // + P Vn (warp 0)
    }
    if constexpr (kNorm) {
      static_assert(std::is_same_v<E, __nv_bfloat16>, "the fused gated norm is bf16");
      // o rounded to bf16 in the head's P terms (C kLdx <= 2 C kLdp), once every warp is done
      // reading them; Xq stays for the next head.
      static_assert(C * kLdx <= 2 * C * kLdp, "o's tile fits in the head's P terms");
      __syncthreads();
      bf16* Os = Ph;
      if (on) {
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int tm = 0; tm < 4; ++tm)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr)
              *reinterpret_cast<__nv_bfloat162*>(Os + (16 * tm + g + 8 * hr) * kLdx + col0 + 8 * r +
                                                 2 * t) =
                  __floats2bfloat162_rn(acc[r][tm][2 * hr], acc[r][tm][2 * hr + 1]);
      }
      __syncthreads();
      gated_norm_rows(Os, nrm, t0, valid, h, Hv, dv, warp, lane, o);
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int tm = 0; tm < 4; ++tm) {
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int i = 16 * tm + g + 8 * hr;
            if (i >= valid) continue;
            E* dst = o + (static_cast<size_t>(t0 + i) * Hv + h) * dv + col0 + 8 * r + 2 * t;
            dst[0] = from_f<E>(acc[r][tm][2 * hr]);
            dst[1] = from_f<E>(acc[r][tm][2 * hr + 1]);
          }
        }
      }
    }
  }
}

// ---- fused core (packs, gdn_fused_mode(); perf-log v25d-v28a): grid (Hv,
// sequences), one CTA a (sequence, value head) walking its chunks with the state in registers,
// after prep_kernel<true> has stored each chunk's T' = Tm diag(beta) and P. Per chunk, with
// R = Xv - diag(e^gamma rk) (Xk S):
//   Vn = T' R,  O = diag(e^gamma rq) (Xq S) + P Vn,  S' = e^{gamma_C} S + Xk^T diag(F) Vn,
// (Vn = U - W S of the three-kernel path, regrouped so that W and U are never formed). NG groups
// of four warps, one per 128 / NG value columns; warp wi of a group owns a chunk row tile of the
// row products and the state's dk row tiles wi and wi + 4. The state enters the products in one
// bf16 term (v25a: within the bf16 bound), R, T' and P in two, Vn for P Vn in one (as the output
// kernel), diag(F) Vn in two (as the scan). The chunk's Xq, Xk and row factors are copied one chunk
// ahead (two slots); T' and P at the chunk's start, waited for only before their products.
// NG column groups of 128 / NG value columns (2: the first form; 4: sixteen warps, half the work a
// warp and four warps a scheduler, perf-log v26b's lever 1).
template <int NG>
constexpr int fused_threads() {
  return 128 * NG;
}
// bf16 row stride of a group's column operands: the scan's at the same width (times_terms reads
// them).
template <int NG>
constexpr int fused_ld() {
  return scan_ld<kMaxHeadDim / NG / 8>();
}
constexpr int kTLd = C + 4;  // fp32 row stride of T' and P (as prep's Tm)
template <int NG>
struct FusedSmem {
  static constexpr int kFLd = fused_ld<NG>();
  bf16* Xq;    // [2 slots][C][kLdx]
  bf16* Xk;    // [2 slots][C][kLdx]
  float* Tp;   // [C][kTLd]
  float* Pp;   // [C][kTLd]
  float* vec;  // [2 slots][gamma, F, rq, rk][C]
  bf16* Sb;    // [NG groups][kMaxHeadDim][kFLd] the state, one term
  bf16* Rh;    // [NG groups][hi, lo][C][kFLd] R, then diag(F) Vn
  bf16* Vb;    // [NG groups][C][kFLd] Vn
  float* ss;   // [NG groups][C] the gated norm's sums of squares over each group's columns
  __device__ explicit FusedSmem(void* p) {
    Xq = static_cast<bf16*>(p);
    Xk = Xq + 2 * C * kLdx;
    Tp = reinterpret_cast<float*>(Xk + 2 * C * kLdx);
    Pp = Tp + C * kTLd;
    vec = Pp + C * kTLd;
    Sb = reinterpret_cast<bf16*>(vec + 2 * 4 * C);
    Rh = Sb + NG * kMaxHeadDim * kFLd;
    Vb = Rh + NG * 2 * C * kFLd;
    ss = reinterpret_cast<float*>(Vb + NG * C * kFLd);
  }
  static constexpr size_t bytes() {
    return sizeof(bf16) *
               (4 * C * kLdx + NG * kMaxHeadDim * kFLd + NG * 2 * C * kFLd + NG * C * kFLd) +
           sizeof(float) * (2 * C * kTLd + 8 * C + NG * C);
  }
};

__device__ __forceinline__ void group_sync(int grp) {
  asm volatile("bar.sync %0, 128;" ::"r"(1 + grp) : "memory");
}

// The m16n16 A fragments (hi, lo terms) of rows 16 tm .. +15, k16 step kk of an fp32 [C][kTLd]
// matrix in shared memory.
__device__ __forceinline__ void fp32_a_terms(const float* M, int tm, int kk, int lane,
                                             uint32_t (&ah)[4], uint32_t (&al)[4]) {
  const int g = lane / 4, t = lane % 4;
  const float* l = M + (16 * tm + g) * kTLd + 16 * kk + 2 * t;
  const float2 x0 = *reinterpret_cast<const float2*>(l);
  const float2 x1 = *reinterpret_cast<const float2*>(l + 8 * kTLd);
  const float2 x2 = *reinterpret_cast<const float2*>(l + 8);
  const float2 x3 = *reinterpret_cast<const float2*>(l + 8 * kTLd + 8);
  uint32_t p0[2], p1[2], p2[2], p3[2];
  split_pair(x0.x, x0.y, p0);
  split_pair(x1.x, x1.y, p1);
  split_pair(x2.x, x2.y, p2);
  split_pair(x3.x, x3.y, p3);
  ah[0] = p0[0], ah[1] = p1[0], ah[2] = p2[0], ah[3] = p3[0];
  al[0] = p0[1], al[1] = p1[1], al[2] = p2[1], al[3] = p3[1];
}

template <bool kNorm, int NG>
__global__ void __launch_bounds__(fused_threads<NG>(), 1)
    fused_kernel(const bf16* __restrict__ xq, const bf16* __restrict__ xk,
                 const bf16* __restrict__ xv, const float* __restrict__ rq,
                 const float* __restrict__ rk, ChunkMap map, int Tc, int Hk, int Hv, Ws ws,
                 GdnGatedNorm nrm, bf16* __restrict__ o, bool longest) {
  constexpr int dk = kMaxHeadDim, dv = kMaxHeadDim;  // fused_supported: 128 x 128 only
  constexpr int kT = fused_threads<NG>(), kFLd = fused_ld<NG>();
  constexpr int NCOL = dv / NG, NT = NCOL / 8, NP = NT / 2;  // a group's columns, n8 tiles, pairs
  extern __shared__ __align__(128) float smem[];
  const FusedSmem<NG> sm(smem);
  const int h = blockIdx.x, kh = h / (Hv / Hk);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int grp = warp / 4, wi = warp % 4, g = lane / 4, t = lane % 4;
  const int c0 = NCOL * grp;  // the group's value columns
  // The row tile of the row products: odd groups take them in reverse, so that the warps on each
  // SM sub-partition (warps w, w + 4, ...) hold tiles k and 3 - k alike, the same share of the
  // triangular T' R and P Vn products (one order left SP 3 four times SP 0's share).
  const int rt = (grp & 1) ? 3 - wi : wi;
  const int r = 16 * rt + g;  // this lane's chunk rows r and r + 8 in the row products
  if (skip_core(map)) return;
  int first, nC;
  map.sequence(longest ? map.longest_first(blockIdx.y, gridDim.y) : blockIdx.y, Tc / C, first, nC);
  if (nC <= 0) return;
  wait_predecessor();  // prep's T', P, gamma, F (the conv prep's outputs came before it)

  auto load_x = [&](int c) {  // chunk c's Xq, Xk and row factors into slot c % 2 (no commit)
    int t0, valid;
    map.chunk(first + c, t0, valid);
    const int b = c & 1;
    bf16* dq = sm.Xq + b * C * kLdx;
    bf16* dkk = sm.Xk + b * C * kLdx;
    const size_t stride = static_cast<size_t>(Hk) * dk;
    const bf16* sq = xq + (static_cast<size_t>(t0) * Hk + kh) * dk;
    const bf16* sk = xk + (static_cast<size_t>(t0) * Hk + kh) * dk;
    for (int e = tid; e < C * (dk / 8); e += kT) {
      const int i = e / (dk / 8), cc = (e % (dk / 8)) * 8;
      const bool in = i < valid;
      cp_async16(dq + i * kLdx + cc, in ? sq + i * stride + cc : sq, in ? 16 : 0);
      cp_async16(dkk + i * kLdx + cc, in ? sk + i * stride + cc : sk, in ? 16 : 0);
    }
    float* v = sm.vec + b * 4 * C;
    const size_t row = static_cast<size_t>(h) * Tc + static_cast<size_t>(first + c) * C;
    if (tid < C / 4) {
      cp_async16(v + 4 * tid, ws.G + row + 4 * tid, 16);
      cp_async16(v + C + 4 * tid, ws.F + row + 4 * tid, 16);
    } else if (tid >= 32 && tid < 32 + C) {
      const int i = tid - 32;
      const bool in = i < valid;
      const size_t f = static_cast<size_t>(t0 + i) * Hk + kh;
      cp_async4(v + 2 * C + i, in ? rq + f : rq, in ? 4 : 0);
      cp_async4(v + 3 * C + i, in ? rk + f : rk, in ? 4 : 0);
    }
  };
  auto load_tp = [&](int c) {  // chunk c's T' and P (one buffer; no commit)
    const float* src =
        ws.W + (static_cast<size_t>(h) * Tc + static_cast<size_t>(first + c) * C) * dk;
    for (int e = tid; e < 2 * C * (C / 4); e += kT) {
      const int m = e / (C * C / 4), i = (e / (C / 4)) % C, cc = (e % (C / 4)) * 4;
      cp_async16((m ? sm.Pp : sm.Tp) + i * kTLd + cc, src + m * C * C + i * C + cc, 16);
    }
  };

  // Chunk c's T' and P, Xv rows and z rows into L2 a chunk ahead: at one CTA an SM each chunk's
  // loads otherwise wait on DRAM inside the chain (T' and P: one bulk request; the rows: one
  // 128-byte line a thread).
  auto prefetch_next = [&](int c) {
    if (c >= nC) return;
    int t0n, validn;
    map.chunk(first + c, t0n, validn);
    if (tid == 0)
      prefetch_l2(ws.W + (static_cast<size_t>(h) * Tc + static_cast<size_t>(first + c) * C) * dk,
                  static_cast<unsigned>(2 * C * C * sizeof(float)));
    if (tid >= 4 * C) return;
    const int i = (tid / 2) % C, half = tid % 2;
    if (i >= validn) return;
    const bf16* p = nullptr;
    if (tid < 2 * C)
      p = xv + (static_cast<size_t>(t0n + i) * Hv + h) * dv + 64 * half;
    else if (kNorm)
      p = nrm.z + static_cast<size_t>(t0n + i) * nrm.ldz + h * dv + 64 * half;
    if (p) asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
  };
  float s[2][NT][4] = {};  // S[dk row tiles wi, wi + 4][the group's columns], fp32
  float2 wn[NT];           // the norm's weights at this lane's columns
  if constexpr (kNorm) {
#pragma unroll
    for (int n = 0; n < NT; ++n) wn[n] = ldg2(nrm.w + c0 + 8 * n + 2 * t);
  }
  bf16* const Sb = sm.Sb + grp * kMaxHeadDim * kFLd;
  bf16* const Rh = sm.Rh + grp * 2 * C * kFLd;
  bf16* const Rl = Rh + C * kFLd;
  bf16* const Vb = sm.Vb + grp * C * kFLd;
  load_x(0);
  cp_async_commit();
  prefetch_next(0);
  for (int c = 0; c < nC; ++c) {
    const int b = c & 1;
    int t0, valid;
    map.chunk(first + c, t0, valid);
    cp_async_wait<0>();  // this thread's copies of chunk c's Xq, Xk and factors
    __syncthreads();     // everyone's, and every read of chunk c - 1's buffers done
    load_tp(c);
    cp_async_commit();
    if (c + 1 < nC) load_x(c + 1);
    cp_async_commit();
    prefetch_next(c + 1);
    const bf16* Xq = sm.Xq + b * C * kLdx;
    const bf16* Xk = sm.Xk + b * C * kLdx;
    const float* gam = sm.vec + b * 4 * C;
    const float* F = gam + C;
    const float* rqs = gam + 2 * C;
    const float* rks = gam + 3 * C;
    // The state before chunk c, one bf16 term, for this group's products.
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const int d = 16 * (wi + 4 * mi) + g;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        *reinterpret_cast<uint32_t*>(Sb + d * kFLd + 8 * n + 2 * t) =
            pack_bf16(s[mi][n][0], s[mi][n][1]);
        *reinterpret_cast<uint32_t*>(Sb + (d + 8) * kFLd + 8 * n + 2 * t) =
            pack_bf16(s[mi][n][2], s[mi][n][3]);
      }
    }
    uint32_t xvv[2][NT];  // Xv at this lane's rows and columns, in flight during the products
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int i = r + 8 * hr;
#pragma unroll
      for (int n = 0; n < NT; ++n)
        xvv[hr][n] =
            i < valid ? __ldg(reinterpret_cast<const unsigned int*>(
                            xv + (static_cast<size_t>(t0 + i) * Hv + h) * dv + c0 + 8 * n + 2 * t))
                      : 0u;
    }
    group_sync(grp);
    // KS = Xk S and QS = Xq S for rows r.., sharing each B fragment of S.
    float ks[NT][4] = {}, qs[NT][4] = {};
#pragma unroll
    for (int kg = 0; kg < dk / 16; ++kg) {
      uint32_t ak[4], aq[4];
      ldmatrix_x4(ak, Xk + (16 * rt + lane % 16) * kLdx + 16 * kg + 8 * (lane / 16));
      ldmatrix_x4(aq, Xq + (16 * rt + lane % 16) * kLdx + 16 * kg + 8 * (lane / 16));
#pragma unroll
      for (int np = 0; np < NP; ++np) {
        uint32_t bb[4];
        ldmatrix_x4_trans(bb, Sb + b_pair_offset(16 * kg, np, kFLd, lane));
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          mma_bf16(ks[2 * np + q], ak, bb[2 * q], bb[2 * q + 1]);
          mma_bf16(qs[2 * np + q], aq, bb[2 * q], bb[2 * q + 1]);
        }
      }
    }
    // R = Xv - diag(e^gamma rk) KS, two bf16 terms.
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int i = r + 8 * hr;
      const float a = __expf(gam[i]) * rks[i];
#pragma unroll
      for (int n = 0; n < NT; ++n)
        put_terms(Rh, Rl, i * kFLd + 8 * n + 2 * t, bf16_lo(xvv[hr][n]) - a * ks[n][2 * hr],
                  bf16_hi(xvv[hr][n]) - a * ks[n][2 * hr + 1]);
    }
    cp_async_wait<1>();  // this thread's copies of T' and P
    __syncthreads();     // everyone's, and R of both groups
    uint32_t zz[2][NT];  // z for the gated norm, in flight during Vn and O
    if constexpr (kNorm) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int i = r + 8 * hr;
#pragma unroll
        for (int n = 0; n < NT; ++n)
          zz[hr][n] = i < valid ? __ldg(reinterpret_cast<const unsigned int*>(
                                      nrm.z + static_cast<size_t>(t0 + i) * nrm.ldz + h * dv + c0 +
                                      8 * n + 2 * t))
                                : 0u;
      }
    }
    // Vn = T' R for rows r.. (T' lower triangular: k16 steps 0 .. rt), two terms by two.
    float vn[NT][4] = {};
    for (int kk = 0; kk <= rt; ++kk) {
      uint32_t ah[4], al[4];
      fp32_a_terms(sm.Tp, rt, kk, lane, ah, al);
      times_two_terms<NT, true>(vn, ah, al, Rh, Rl, 16 * kk, lane);
    }
    group_sync(grp);  // every read of R done: diag(F) Vn goes over it
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int i = r + 8 * hr;
      const float f = F[i];
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const int off = i * kFLd + 8 * n + 2 * t;
        *reinterpret_cast<uint32_t*>(Vb + off) = pack_bf16(vn[n][2 * hr], vn[n][2 * hr + 1]);
        put_terms(Rh, Rl, off, f * vn[n][2 * hr], f * vn[n][2 * hr + 1]);
      }
    }
    group_sync(grp);
    // O = diag(e^gamma rq) QS + P Vn (P lower triangular incl. the diagonal), in qs.
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int i = r + 8 * hr;
      const float qf = __expf(gam[i]) * rqs[i];
#pragma unroll
      for (int n = 0; n < NT; ++n) qs[n][2 * hr] *= qf, qs[n][2 * hr + 1] *= qf;
    }
    for (int kk = 0; kk <= rt; ++kk) {
      uint32_t ah[4], al[4];
      fp32_a_terms(sm.Pp, rt, kk, lane, ah, al);
      times_terms<NT, true>(qs, ah, al, Vb, 16 * kk, lane);
    }
    if constexpr (kNorm) {
      // y = (RMSNorm(o) w) silu(z) over dv = all groups' columns, gated_rms_norm's rounding
      // points (gdn.h GdnGatedNorm); each row's sum of squares in NG parts through smem.
      float ssum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const float x0 = rnd<bf16>(qs[n][2 * hr]), x1 = rnd<bf16>(qs[n][2 * hr + 1]);
          qs[n][2 * hr] = x0, qs[n][2 * hr + 1] = x1;
          ssum[hr] += x0 * x0 + x1 * x1;
        }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        ssum[hr] += __shfl_xor_sync(0xffffffffu, ssum[hr], 1);
        ssum[hr] += __shfl_xor_sync(0xffffffffu, ssum[hr], 2);
      }
      if (t == 0) sm.ss[grp * C + r] = ssum[0], sm.ss[grp * C + r + 8] = ssum[1];
      __syncthreads();
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int i = r + 8 * hr;
        if (i >= valid) continue;
        float sq = sm.ss[i];
#pragma unroll
        for (int q = 1; q < NG; ++q) sq += sm.ss[q * C + i];
        const float rs = rsqrtf(sq / static_cast<float>(dv) + nrm.eps);
        bf16* y = o + (static_cast<size_t>(t0 + i) * Hv + h) * dv + c0 + 2 * t;
#pragma unroll
        for (int n = 0; n < NT; ++n)
          *reinterpret_cast<__nv_bfloat162*>(y + 8 * n) =
              gated_norm_pair(qs[n][2 * hr], qs[n][2 * hr + 1], rs, wn[n], zz[hr][n]);
      }
    } else {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int i = r + 8 * hr;
        if (i >= valid) continue;
        bf16* y = o + (static_cast<size_t>(t0 + i) * Hv + h) * dv + c0 + 2 * t;
#pragma unroll
        for (int n = 0; n < NT; ++n)
          *reinterpret_cast<uint32_t*>(y + 8 * n) = pack_bf16(qs[n][2 * hr], qs[n][2 * hr + 1]);
      }
    }
    if (c + 1 == nC) break;  // the state after the last chunk is not needed
    // S = e^{gamma_C} S + Xk^T diag(F) Vn (Xk^T by ldmatrix.trans of the chunk's keys).
    const float egl = __expf(gam[C - 1]);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const int mt = wi + 4 * mi;
      scale_tile(s[mi], egl);
#pragma unroll
      for (int kg = 0; kg < C / 16; ++kg) {
        uint32_t a[4];
        xk_t_frag(a, Xk, kLdx, kg, mt, lane);
        times_two_terms<NT, false>(s[mi], a, a, Rh, Rl, 16 * kg, lane);
      }
    }
  }
}

// kernel<<<grid, block, smem, s>>>(args...), with a programmatic edge to the kernel before it in
// the stream where `pdl` (cudaLaunchKernelEx; captured graphs keep the edge).
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, int block, size_t smem, cudaStream_t s, bool pdl,
            Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = pdl ? attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  CLEF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...));
}

// How the scan is launched: a programmatic edge to prep (pdl), the output kernel's early start
// (`early`, see scan_kernel), CTAs an SM (gdn_scan_blocks), the chain's lo terms (TcLaunch), its
// sequence order, its width and its L2 requests.
struct ScanLaunch {
  bool pdl = false, early = false;
  int blocks = 1;
  int lo = kLoW | kLoS | kLoV;  // the lo terms the chain's products keep (TcLaunch)
  bool longest = true;          // sequences longest first (TcLaunch::longest_first)
  int nt = 4;                   // n8 column tiles a CTA (scan_nt)
  bool prefetch = true;         // W and U two chunks ahead into L2 (gdn_scan_prefetch)
  bool progress = false;        // progress counts for the output kernel (gdn_scan_progress)
  bool wgmma = false;           // the chain on warpgroup MMAs (scan_wgmma; the same bits)
};

template <int NT, bool kOut, int kBlocks, bool kWg = false>
void launch_scan_nt(const bf16* xk, const ChunkMap& map, int seqs, int Tc, int Hk, int Hv, int dk,
                    int dv, const Ws& ws, const ScanOutArgs& oa, cudaStream_t s,
                    const ScanLaunch& how) {
  constexpr size_t bytes = ScanSmem<NT, kOut, kWg>::bytes();
  auto* k = scan_kernel<NT, kOut, kBlocks, kWg>;
  CLEF_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
  launch(k, dim3(dv / (8 * NT), Hv, seqs), kOut ? kScanOutThreads : kScanThreads, bytes, s, how.pdl,
         xk, map, Tc, Hk, Hv, dk, dv, ws, oa, how.early, how.lo, how.longest, how.prefetch,
         how.progress);
}

// oa.o set: the scan that also forms o (kOut; the caller asks for one CTA an SM, no early start);
// else kBlocks = how.blocks.
template <int NT>
void launch_scan_cols(const bf16* xk, const ChunkMap& map, int seqs, int Tc, int Hk, int Hv, int dk,
                      int dv, const Ws& ws, const ScanOutArgs& oa, cudaStream_t s,
                      const ScanLaunch& how) {
  if (oa.o)
    launch_scan_nt<NT, true, 1>(xk, map, seqs, Tc, Hk, Hv, dk, dv, ws, oa, s, how);
  else if (how.blocks == 2)
    launch_scan_nt<NT, false, 2>(xk, map, seqs, Tc, Hk, Hv, dk, dv, ws, oa, s, how);
  else
    launch_scan_nt<NT, false, 1>(xk, map, seqs, Tc, Hk, Hv, dk, dv, ws, oa, s, how);
}

// The scan's n8 column tiles a CTA. One sequence: 32 columns where dv allows (half the CTAs
// re-reading each chunk's W and keys from L2, which bounds the scan's step time; H200, 961
// tokens: 94 -> 86-90 us per layer), else 16. A packed grid (one CTA an SM, several waves): 64
// columns where dv allows: half the CTA-steps, each ~1.5x as long (W, the keys and the hand-offs
// once for twice the columns), and a quarter of the waves' tails (H100, workbench scan a layer:
// 7 x 1000 287 -> 243 us, 28 x 330 456 -> 340, 2000 + 1000 x 4 + 500 x 6 371 -> 279; one 5000-token
// chain beside six of 300, bound by its own 79 steps, 279 -> 290: perf-log v25b).
// `asked`: TcLaunch::scan_nt (0: gdn_scan_wide()).
int scan_nt(int dv, int sequences, int asked) {
  const bool wide = asked == 8 || (asked == 0 && gdn_scan_wide());
  return wide && sequences > 1 && dv % 64 == 0 ? 8 : dv % 32 == 0 ? 4 : 2;
}

void launch_scan(const bf16* xk, const ChunkMap& map, int seqs, int Tc, int Hk, int Hv, int dk,
                 int dv, const Ws& ws, const ScanOutArgs& oa, cudaStream_t s,
                 const ScanLaunch& how) {
  if (how.wgmma) {  // chunked_tc asks only where scan_wgmma_supported, 32 or 64 columns, one a SM
    if (how.nt == 8)
      launch_scan_nt<8, false, 1, true>(xk, map, seqs, Tc, Hk, Hv, dk, dv, ws, oa, s, how);
    else
      launch_scan_nt<4, false, 1, true>(xk, map, seqs, Tc, Hk, Hv, dk, dv, ws, oa, s, how);
    return;
  }
  if (how.nt == 8)
    launch_scan_nt<8, false, 1>(xk, map, seqs, Tc, Hk, Hv, dk, dv, ws, oa, s, how);
  else if (how.nt == 4)
    launch_scan_cols<4>(xk, map, seqs, Tc, Hk, Hv, dk, dv, ws, oa, s, how);
  else
    launch_scan_cols<2>(xk, map, seqs, Tc, Hk, Hv, dk, dv, ws, oa, s, how);
}

// Fixed sizes (the tiles take kMaxHeadDim columns): 55.25 KiB (four CTAs per SM); the output
// kernel's (output_smem, above) 53 KiB for one head, 71.5 KiB for a pair (three either way).
constexpr size_t prep_smem() {
  return sizeof(float) * (2 * C * (C + 4) + 3 * 256 + 5 * C) + sizeof(bf16) * C * kLdx;
}

// The opt-in shared memory per block and the multiprocessors (cached per device).
size_t smem_optin() {
  return static_cast<size_t>(device_attribute(DeviceAttr::SmemOptin));
}
int sm_count() {
  return device_attribute(DeviceAttr::SmCount);
}

// The head dims the tensor-core kernels are built for.
bool tc_shapes(int dk, int dv) {
  return dk % 16 == 0 && dv % 16 == 0 && dk >= 16 && dv >= 16 && dk <= kMaxHeadDim &&
         dv <= kMaxHeadDim;
}

}  // namespace

bool tc_supported(int dk, int dv) {
  return tc_shapes(dk, dv) &&
         std::max({prep_smem(), output_smem<2>(), ScanSmem<4>::bytes()}) <= smem_optin();
}

bool fused_supported(int dk, int dv) {
  return dk == kMaxHeadDim && dv == kMaxHeadDim && tc_supported(dk, dv) &&
         device_attribute(DeviceAttr::CcMajor) >= 8 &&
         std::max(FusedSmem<2>::bytes(), FusedSmem<4>::bytes()) <= smem_optin();
}

bool scan_wgmma_supported(int dk, int dv) {
  // sm_90 exactly: wgmma is in the binary's sm_90a code, not in the sm_90 PTX it also carries.
  const bool sm90 =
      device_attribute(DeviceAttr::CcMajor) == 9 && device_attribute(DeviceAttr::CcMinor) == 0;
  return dk == kMaxHeadDim && dv % 32 == 0 && tc_supported(dk, dv) && sm90 &&
         std::max(ScanSmem<8, false, true>::bytes(), ScanSmem<4, false, true>::bytes()) <=
             smem_optin();
}

bool tc_scan_output_supported(int dk, int dv) {
  const size_t scan = dv % 32 == 0 ? ScanSmem<4, true>::bytes() : ScanSmem<2, true>::bytes();
  return tc_shapes(dk, dv) && std::max({prep_smem(), output_smem<2>(), scan}) <= smem_optin();
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

namespace {
// Block r of `n` (one warp): the slot ChunkMap::longest_first gives rank r.
__global__ void sequence_order_kernel(const int32_t* seq0, int n, int* order) {
  const ChunkMap map{nullptr, nullptr, seq0, 0};
  const int s = map.longest_first(blockIdx.x, n);
  if (threadIdx.x == 0) order[blockIdx.x] = s;
}
// One warp: g's 64 values through chunk_cumsum in shared memory.
__global__ void chunk_prefix_kernel(const float* g, float* out) {
  __shared__ float gam[C];
  gam[threadIdx.x] = g[threadIdx.x], gam[threadIdx.x + 32] = g[threadIdx.x + 32];
  __syncwarp();
  chunk_cumsum(gam);
  __syncwarp();
  out[threadIdx.x] = gam[threadIdx.x], out[threadIdx.x + 32] = gam[threadIdx.x + 32];
}
}  // namespace

std::vector<float> chunk_prefix_sums(const std::vector<float>& g) {
  if (g.size() != static_cast<size_t>(C))
    throw std::invalid_argument("chunk_prefix_sums: 64 values, got " + std::to_string(g.size()));
  DeviceBuffer in(C * sizeof(float)), out(C * sizeof(float));
  CLEF_CUDA_CHECK(cudaMemcpy(in.get(), g.data(), in.bytes(), cudaMemcpyHostToDevice));
  chunk_prefix_kernel<<<1, 32>>>(in.get<float>(), out.get<float>());
  CLEF_CUDA_CHECK(cudaGetLastError());
  std::vector<float> r(C);
  CLEF_CUDA_CHECK(cudaMemcpy(r.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost));
  return r;
}

std::vector<int> scan_sequence_order(const std::vector<int32_t>& seq_chunk0) {
  const int n = static_cast<int>(seq_chunk0.size()) - 1;
  if (n <= 0) return {};
  DeviceBuffer seq0(seq_chunk0.size() * sizeof(int32_t)), order(n * sizeof(int));
  CLEF_CUDA_CHECK(cudaMemcpy(seq0.get(), seq_chunk0.data(), seq0.bytes(), cudaMemcpyHostToDevice));
  sequence_order_kernel<<<n, 32>>>(seq0.get<int32_t>(), n, order.get<int>());
  CLEF_CUDA_CHECK(cudaGetLastError());
  std::vector<int> out(n);
  CLEF_CUDA_CHECK(cudaMemcpy(out.data(), order.get(), n * sizeof(int), cudaMemcpyDeviceToHost));
  return out;
}

size_t tc_workspace_floats(int Tc, int Hv, int dk, int dv) {
  const size_t rows = static_cast<size_t>(Hv) * Tc, nC = Tc / C;
  return rows * (dk + dv + dv / 2 + 2) + static_cast<size_t>(Hv) * nC * dk * dv / 2 +
         nC * Hv * kProgressSlots + nC;
}

void chunked_tc(const GdnInputs& in, int T, int Hk, int Hv, int dk, int dv, __nv_bfloat16* o,
                float* workspace, cudaStream_t s, cudaEvent_t between, cudaEvent_t after_scan,
                const GdnSequences* seqs, const GdnGatedNorm* norm, bool scan_output,
                TcLaunch how) {
  const ChunkMap map = seqs ? ChunkMap{seqs->chunk_row0, seqs->chunk_valid, seqs->seq_chunk0, T}
                            : ChunkMap{nullptr, nullptr, nullptr, T};
  const int nC = seqs ? seqs->chunk_slots : (T + C - 1) / C, Tc = nC * C;
  const int n_seqs = seqs ? seqs->seq_slots : 1;
  const Ws ws = carve(workspace, Tc, Hv, dk, dv);
  if (how.scan_wgmma_ran) *how.scan_wgmma_ran = false;
  constexpr size_t ps = prep_smem();
  CLEF_CUDA_CHECK(cudaFuncSetAttribute(
      prep_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(ps)));
  // Value heads an output CTA: the pair where a key head has an even number of them and one head
  // a CTA would need more than one wave (three CTAs an SM); within one wave a pair only makes each
  // CTA longer (H200, 361 tokens, 192 CTAs: GDN stage 1.59 -> 1.81 ms with pairs; perf-log v18c).
  const bool pairs = (Hv / Hk) % 2 == 0 && gdn_output_pairs_allowed() &&
                     static_cast<long long>(nC) * Hv > 3LL * sm_count();
  const int nh = pairs ? 2 : 1;
  auto* out =
      nh == 2
          ? (norm ? output_kernel<__nv_bfloat16, true, 2> : output_kernel<__nv_bfloat16, false, 2>)
          : (norm ? output_kernel<__nv_bfloat16, true, 1> : output_kernel<__nv_bfloat16, false, 1>);
  const size_t os = nh == 2 ? output_smem<2>() : output_smem<1>();
  CLEF_CUDA_CHECK(
      cudaFuncSetAttribute(out, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(os)));
  // Programmatic edges (sm_90): each kernel starts while the one before it drains (no edge
  // across the profiling events). The scan: two CTAs an SM where one sequence passes one wave.
  const bool pdl = (how.pdl < 0 ? gdn_pdl_allowed() : how.pdl == 1) &&
                   device_attribute(DeviceAttr::CcMajor) >= 9;
  int nt = scan_nt(dv, n_seqs, how.scan_nt);
  const long long scan_ctas = static_cast<long long>(dv / (8 * nt)) * Hv * n_seqs;
  const int blocks = how.scan_blocks == 1 || how.scan_blocks == 2
                         ? how.scan_blocks
                         : gdn_scan_blocks(scan_ctas, sm_count(), n_seqs);
  // The output kernel's early start: only beside a one-wave scan of at least 32 chunk steps (H200,
  // workbench, whole core: 8-9 us a layer faster at 2761 and 5661 tokens, 2-3 us slower at 361
  // and 961, where the P terms' work beside the scan's first steps costs the chain more than the
  // late CTAs gain; perf-log v20a).
  const bool early = scan_ctas <= static_cast<long long>(blocks) * sm_count() && nC >= 32;
  // 64 columns exist only as the plain scan at one CTA an SM (the others would spill).
  if (nt == 8 && (blocks != 1 || scan_output)) nt = 4;
  auto terms = [](int asked, int process) { return asked == 1 || asked == 2 ? asked : process; };
  const int lo = (terms(how.w_terms, gdn_w_terms()) == 2 ? kLoW : 0) |
                 (terms(how.s_terms, gdn_s_terms()) == 2 ? kLoS : 0) |
                 (terms(how.v_terms, gdn_v_terms()) == 2 ? kLoV : 0);
  const bool longest = how.longest_first < 0 ? gdn_longest_first() : how.longest_first == 1;
  // The L2 requests were measured on packs only (perf-log v25c): one sequence (a C1 request) runs
  // the scan as before them.
  const bool prefetch = n_seqs > 1 && gdn_scan_prefetch();
  // The fused core (perf-log v26b-v27): prep's T' and P, then one kernel to o (or y). By the
  // process's choice for packed grids only: one sequence has 32 CTAs walking its whole chain
  // (H100, 361 tokens: 73 us against 49 us for the three kernels). Per pack (GdnSequences::fused):
  // both cores are launched, prep<true>, prep<false>, fused, scan, output, and the kernels of the
  // one the device flag does not name exit at once.
  const bool fusable = !scan_output && fused_supported(dk, dv);
  const bool per_pack =
      fusable && seqs && seqs->fused && n_seqs > 1 &&
      (how.fused == 2 || (how.fused == 0 && gdn_fused_mode() == GdnFusedMode::PerPack));
  const bool fused =
      fusable && !per_pack &&
      (how.fused == 1 || (how.fused == 0 && n_seqs > 1 && gdn_fused_mode() == GdnFusedMode::On));
  ChunkMap mf = map, m3 = map;  // the fused core's kernels' map, the three kernels'
  if (per_pack) {
    mf.core = m3.core = seqs->fused;
    mf.core_runs_if = 1;
    m3.core_runs_if = 0;
  }
  if (fused || per_pack) {
    CLEF_CUDA_CHECK(cudaFuncSetAttribute(
        prep_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(ps)));
    launch(prep_kernel<true>, dim3(nC, Hv), kThreads, ps, s, pdl, in.xk, in.xv, in.rk, in.g,
           in.beta, mf, Tc, Hk, Hv, dk, dv, ws, in.xq, in.rq, n_seqs, false);
  }
  auto launch_fused = [&](bool edge) {
    const int groups = how.fused_groups ? how.fused_groups : gdn_fused_groups();
    auto go = [&](auto ng) {
      constexpr int NG = decltype(ng)::value;
      auto* fk = norm ? fused_kernel<true, NG> : fused_kernel<false, NG>;
      constexpr size_t fs = FusedSmem<NG>::bytes();
      CLEF_CUDA_CHECK(cudaFuncSetAttribute(fk, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(fs)));
      launch(fk, dim3(Hv, n_seqs), fused_threads<NG>(), fs, s, edge, in.xq, in.xk, in.xv, in.rq,
             in.rk, mf, Tc, Hk, Hv, ws, norm ? *norm : GdnGatedNorm{}, o, longest);
    };
    if (groups == 4)
      go(std::integral_constant<int, 4>{});
    else
      go(std::integral_constant<int, 2>{});
  };
  if (fused) {
    if (between) CLEF_CUDA_CHECK(cudaEventRecord(between, s));
    launch_fused(pdl && !between);
    if (after_scan) CLEF_CUDA_CHECK(cudaEventRecord(after_scan, s));
    return;
  }
  // The scan's progress for the output kernel (gdn_scan_progress): packs whose three kernels are
  // chained by programmatic edges with no event between them, every count of a head in one slot
  // set. The output CTAs then start once every scan CTA runs (the scan lets dependents start at
  // once) and each waits for its own chunk only.
  const bool scan_edge = pdl && (per_pack || !between);
  const int progress_slots = dv / (8 * nt);  // a count a column CTA
  const bool progress = scan_edge && !after_scan && !scan_output && !per_pack && n_seqs > 1 &&
                        progress_slots <= kProgressSlots &&
                        (how.progress == 0 ? gdn_scan_progress() : how.progress == 1);
  launch(prep_kernel<false>, dim3(nC, Hv), kThreads, ps, s, pdl, in.xk, in.xv, in.rk, in.g, in.beta,
         m3, Tc, Hk, Hv, dk, dv, ws, static_cast<const bf16*>(nullptr),
         static_cast<const float*>(nullptr), n_seqs, progress);
  if (between) CLEF_CUDA_CHECK(cudaEventRecord(between, s));
  if (per_pack) launch_fused(pdl && !between);
  if (scan_output) {  // o straight from the scan: no published states, no output kernel
    launch_scan(in.xk, m3, n_seqs, Tc, Hk, Hv, dk, dv, ws, ScanOutArgs{in.xq, in.rq, in.rk, o}, s,
                ScanLaunch{pdl && !between, false, 1, lo, longest, nt, prefetch});
    if (after_scan) CLEF_CUDA_CHECK(cudaEventRecord(after_scan, s));
    return;
  }
  // The chain on warpgroup MMAs (perf-log v32a-d): the mma.sync scan's bits (a column's k16
  // products and its accumulations in the same order), at one CTA an SM, 32 or 64 columns.
  const bool wgmma = (how.scan_wgmma == 0 ? gdn_scan_wgmma() : how.scan_wgmma == 1) &&
                     scan_wgmma_supported(dk, dv) && blocks == 1 && (nt == 8 || nt == 4) &&
                     lo == (kLoW | kLoS | kLoV);  // it keeps every lo term
  if (how.scan_wgmma_ran) *how.scan_wgmma_ran = wgmma;
  // The scan's edge is to the fused kernel in a per-pack grid (no event between them).
  launch_scan(in.xk, m3, n_seqs, Tc, Hk, Hv, dk, dv, ws, ScanOutArgs{}, s,
              ScanLaunch{scan_edge, scan_edge && !after_scan && (early || progress), blocks, lo,
                         longest, nt, prefetch, progress, wgmma});
  if (after_scan) CLEF_CUDA_CHECK(cudaEventRecord(after_scan, s));
  launch(out, dim3(nC, Hv / nh), kOutThreads, os, s, pdl && !after_scan, in.xq, in.xk, in.rq, in.rk,
         m3, Tc, Hk, Hv, dk, dv, ws, norm ? *norm : GdnGatedNorm{}, o,
         progress ? progress_slots : 0);
}

}  // namespace clef::engine::cuda::gdn

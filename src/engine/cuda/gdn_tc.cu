// Tensor-core chunked gated delta rule (see gdn_tc.h). Notation of gdn_chunked.cu with C = 64:
//   gamma = in-chunk cumulative log decay, A_ij = beta_i (k_i.k_j) e^{gamma_i-gamma_j} (i > j),
//   Tm = (I + A)^-1, W = Tm diag(beta e^gamma) K, U = Tm diag(beta) V,
//   Vn = U - W S, O = diag(e^gamma) Q S + ((Q K^T) o Gamma_incl) Vn,
//   S' = e^{gamma_C} S + (K diag(e^{gamma_C - gamma}))^T Vn.
// Three kernels: prep (parallel over chunk x value head), scan (sequential over chunks: only the
// two products on the state's critical path), output (parallel again, from the published states).
#include <algorithm>
#include <cstdint>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/gdn_tc.h"
#include "engine/cuda/gdn_tiles.cuh"
#include "engine/cuda/tf32x3.cuh"

namespace clef::engine::cuda::gdn {
namespace {

using namespace tf32x3;
constexpr int C = kChunk;
constexpr int kThreads = kTileThreads;  // prep and output kernels
constexpr int kScanWarps = 4;
constexpr int kScanNT = 2;            // n8 tiles of value columns per scan CTA
constexpr int kScanBV = 8 * kScanNT;  // value columns per scan CTA
constexpr int kScanLd = kScanBV + 2;  // shared row stride: conflict-free B-fragment reads

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

__device__ __forceinline__ float4 ldg4(const float* p) {
  return __ldg(reinterpret_cast<const float4*>(p));
}
__device__ __forceinline__ float2 ldg2(const float* p) {
  return __ldg(reinterpret_cast<const float2*>(p));
}

// ---- prep: grid (nC, Hv). Shared: Ks [C][dk+8], Vs [C][dv+8], Am, Tm [C][C+8], X [3][16][16],
// gam, bet [C].
__global__ void __launch_bounds__(kThreads, 2)
    prep_kernel(const float* __restrict__ k, const float* __restrict__ v,
                const float* __restrict__ g, const float* __restrict__ beta, int T, int Tc, int Hk,
                int Hv, int dk, int dv, Ws ws) {
  extern __shared__ __align__(128) float smem[];
  const int chunk = blockIdx.x, h = blockIdx.y, kh = h / (Hv / Hk), nC = Tc / C;
  const int t0 = chunk * C, valid = min(C, T - t0);
  const int ldk = dk + 8, ldv = dv + 8, lda = C + 8;
  float* Ks = smem;
  float* Vs = Ks + C * ldk;
  float* Am = Vs + C * ldv;
  float* Tm = Am + C * lda;
  float* X = Tm + C * lda;
  float* gam = X + 3 * 256;
  float* bet = gam + C;
  const int tid = threadIdx.x, warp = tid / 32;

  load_tiles(Ks, ldk, k + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk,
             dk, Vs, ldv, v + (static_cast<size_t>(t0) * Hv + h) * dv, static_cast<size_t>(Hv) * dv,
             dv, valid);
  if (tid < C) {
    gam[tid] = tid < valid ? g[static_cast<size_t>(t0 + tid) * Hv + h] : 0.0f;
    bet[tid] = tid < valid ? beta[static_cast<size_t>(t0 + tid) * Hv + h] : 0.0f;
  }
  __syncthreads();
  chunk_cumsum(gam);                                         // warp 0
  for (int tile = warp; tile < 16; tile += kThreads / 32) {  // K K^T, lower tiles only
    const int tm = tile / 4, tn = tile % 4;
    if (tn > tm) continue;
    FragC acc;
    wm::fill_fragment(acc, 0.0f);
    mma_rows<true>(acc, Ks + tm * 16 * ldk, ldk, Ks + tn * 16 * ldk, ldk, dk);
    wm::store_matrix_sync(Am + tm * 16 * lda + tn * 16, acc, lda, wm::mem_row_major);
  }
  __syncthreads();
  const size_t row0 = static_cast<size_t>(h) * Tc + t0;
  {  // decayed K^T for the scan (needs only gamma)
    const float gl = gam[C - 1];
    float* kt = ws.KT + (static_cast<size_t>(h) * nC + chunk) * dk * C;
    for (int e = tid; e < dk * C; e += kThreads) {
      const int d = e / C, j = e % C;
      kt[e] = Ks[j * ldk + d] * expf(gl - gam[j]);
    }
    if (tid < C) ws.G[row0 + tid] = gam[tid];
  }
  for (int e = tid; e < C * C; e += kThreads) {
    const int i = e / C, j = e % C;
    Am[i * lda + j] = i > j ? bet[i] * Am[i * lda + j] * expf(gam[i] - gam[j]) : 0.0f;
    Tm[i * lda + j] = 0.0f;
  }
  __syncthreads();
  // Tm = (I + A)^-1 blockwise. Diagonal 16x16 blocks by forward substitution, one thread per
  // column (no syncs inside); then the off-diagonal blocks by distance from the diagonal,
  // T_IJ = -T_II sum_{M=J}^{I-1} A_IM T_MJ (6 syncs instead of 63).
  if (tid < 64) {
    const int o = 16 * (tid / 16), j = tid % 16;
    for (int i = 0; i < 16; ++i) {
      float s = i == j ? 1.0f : 0.0f;
      for (int m = j; m < i; ++m) s -= Am[(o + i) * lda + o + m] * Tm[(o + m) * lda + o + j];
      Tm[(o + i) * lda + o + j] = s;
    }
  }
  __syncthreads();
  for (int dist = 1; dist < 4; ++dist) {
    const int n = (4 - dist) * 256;
    for (int e = tid; e < n; e += kThreads) {
      const int I = dist + e / 256, J = I - dist, r = (e / 16) % 16, c = e % 16;
      float s = 0.0f;
      for (int kk = 16 * J; kk < 16 * I; ++kk)
        s += Am[(16 * I + r) * lda + kk] * Tm[kk * lda + 16 * J + c];
      X[e] = s;
    }
    __syncthreads();
    for (int e = tid; e < n; e += kThreads) {
      const int I = dist + e / 256, J = I - dist, r = (e / 16) % 16, c = e % 16;
      const float* x = X + (e / 256) * 256;
      float s = 0.0f;
      for (int m = 0; m <= r; ++m) s += Tm[(16 * I + r) * lda + 16 * I + m] * x[m * 16 + c];
      Tm[(16 * I + r) * lda + 16 * J + c] = -s;
    }
    __syncthreads();
  }
  // Am <- Tm diag(beta e^gamma), Tm <- Tm diag(beta) (e^gamma <= 1).
  for (int e = tid; e < C * C; e += kThreads) {
    const int i = e / C, j = e % C;
    const float t = j <= i ? Tm[i * lda + j] : 0.0f;
    Am[i * lda + j] = t * bet[j] * expf(gam[j]);
    Tm[i * lda + j] = t * bet[j];
  }
  __syncthreads();
  const int nw = 4 * (dk / 16), nu = 4 * (dv / 16);
  for (int tile = warp; tile < nw + nu; tile += kThreads / 32) {  // W = Am K, U = Tm V
    const bool is_w = tile < nw;
    const int t = is_w ? tile : tile - nw, tm = t % 4, tn = t / 4;
    FragC acc;
    wm::fill_fragment(acc, 0.0f);
    if (is_w) {  // lower-triangular left factor: k only up to the tile's last row
      mma_rows<false>(acc, Am + tm * 16 * lda, lda, Ks + tn * 16, ldk, 16 * (tm + 1));
      wm::store_matrix_sync(ws.W + (row0 + tm * 16) * dk + tn * 16, acc, dk, wm::mem_row_major);
    } else {
      mma_rows<false>(acc, Tm + tm * 16 * lda, lda, Vs + tn * 16, ldv, 16 * (tm + 1));
      wm::store_matrix_sync(ws.U + (row0 + tm * 16) * dv + tn * 16, acc, dv, wm::mem_row_major);
    }
  }
}

// ---- scan: grid (dv / kScanBV, Hv), kScanWarps warps, sequential over chunks. The state S
// [dk][kScanBV] lives in registers: warp w holds rows 16 (w + 4 mi) .. +15 as m16n8 accumulators.
// Per chunk: publish S (shared + global), Vn = U - W S (warp w: chunk rows 16w..16w+15), then
// S = e^{gamma_C} S + KT Vn. The A operands (W, KT rows, contiguous in k) come straight from global
// memory into registers, fetched one chunk ahead; their k index is permuted within each 16-column
// group (thread t holds physical columns 4t..4t+3 as logical k = t, t+4 of two k8 steps) so that a
// float4 load feeds two mma steps; the B operands read the same permutation from shared memory.
__global__ void __launch_bounds__(kScanWarps * 32, 2) scan_kernel(int Tc, int dk, int dv, Ws ws) {
  __shared__ float Hs[kMaxHeadDim][kScanLd];
  __shared__ float Vs[C][kScanLd];
  const int h = blockIdx.y, c0 = blockIdx.x * kScanBV;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int nC = Tc / C, kgs = dk / 16;
  const float* Wh = ws.W + static_cast<size_t>(h) * Tc * dk;
  const float* Uh = ws.U + static_cast<size_t>(h) * Tc * dv;
  const float* KTh = ws.KT + static_cast<size_t>(h) * nC * dk * C;
  const float* Gh = ws.G + static_cast<size_t>(h) * Tc;
  float* Hh = ws.H + static_cast<size_t>(h) * nC * dk * dv;
  float* Vnh = ws.Vn + static_cast<size_t>(h) * Tc * dv;

  float4 wa[kMaxHeadDim / 16][2];  // W rows 16 warp + g (+8), columns 16 kg + 4t .. +3
  float4 ka[2][C / 16][2];         // KT rows 16 (warp + 4 mi) + g (+8), columns 16 kg + 4t .. +3
  float2 ua[2][kScanNT];           // U rows 16 warp + g (+8), columns c0 + 8n + 2t, +1
  float sacc[2][kScanNT][4];       // the state, C layout
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int n = 0; n < kScanNT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) sacc[mi][n][i] = 0.0f;

  auto load_w = [&](int chunk) {
    const float* p = Wh + (static_cast<size_t>(chunk) * C + 16 * warp + g) * dk + 4 * t;
#pragma unroll
    for (int kg = 0; kg < kMaxHeadDim / 16; ++kg)
      if (kg < kgs) {
        wa[kg][0] = ldg4(p + 16 * kg);
        wa[kg][1] = ldg4(p + 8 * dk + 16 * kg);
      }
  };
  auto load_k = [&](int chunk) {
    const float* p = KTh + static_cast<size_t>(chunk) * dk * C + 4 * t;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const int mt = warp + kScanWarps * mi;
      if (mt < kgs) {
#pragma unroll
        for (int kg = 0; kg < C / 16; ++kg) {
          ka[mi][kg][0] = ldg4(p + (16 * mt + g) * C + 16 * kg);
          ka[mi][kg][1] = ldg4(p + (16 * mt + g + 8) * C + 16 * kg);
        }
      }
    }
  };
  auto load_u = [&](int chunk) {
    const float* p = Uh + (static_cast<size_t>(chunk) * C + 16 * warp + g) * dv + c0 + 2 * t;
#pragma unroll
    for (int n = 0; n < kScanNT; ++n) {
      ua[0][n] = ldg2(p + 8 * n);
      ua[1][n] = ldg2(p + 8 * dv + 8 * n);
    }
  };
  load_w(0);
  load_k(0);
  load_u(0);
  float gl = __ldg(Gh + C - 1);

  for (int chunk = 0; chunk < nC; ++chunk) {
    const float egl = expf(gl);
    if (chunk + 1 < nC) gl = __ldg(Gh + static_cast<size_t>(chunk + 1) * C + C - 1);
      // 1. publish the state before this chunk
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const int mt = warp + kScanWarps * mi;
      if (mt >= kgs) continue;
      const int d = 16 * mt + g;
#pragma unroll
      for (int n = 0; n < kScanNT; ++n) {
        const int col = 8 * n + 2 * t;
        const float2 lo = make_float2(sacc[mi][n][0], sacc[mi][n][1]);
        const float2 hi = make_float2(sacc[mi][n][2], sacc[mi][n][3]);
        *reinterpret_cast<float2*>(&Hs[d][col]) = lo;
        *reinterpret_cast<float2*>(&Hs[d + 8][col]) = hi;
        float* gp = Hh + (static_cast<size_t>(chunk) * dk + d) * dv + c0 + col;
        *reinterpret_cast<float2*>(gp) = lo;
        *reinterpret_cast<float2*>(gp + 8 * dv) = hi;
      }
    }
    __syncthreads();
    // 2. Vn = U - W S for chunk rows 16 warp .. +15 (two accumulator sets for ILP)
    float vacc[2][kScanNT][4];
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
      for (int n = 0; n < kScanNT; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) vacc[p][n][i] = 0.0f;
#pragma unroll
    for (int kg = 0; kg < kMaxHeadDim / 16; ++kg) {
      if (kg >= kgs) continue;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const float a[4] = {s ? wa[kg][0].z : wa[kg][0].x, s ? wa[kg][1].z : wa[kg][1].x,
                            s ? wa[kg][0].w : wa[kg][0].y, s ? wa[kg][1].w : wa[kg][1].y};
        const int k0 = 16 * kg + 4 * t + 2 * s;
#pragma unroll
        for (int n = 0; n < kScanNT; ++n) {
          const float b[2] = {Hs[k0][8 * n + g], Hs[k0 + 1][8 * n + g]};
          mma3(vacc[kg & 1][n], a, b);
        }
      }
    }
    if (chunk + 1 < nC) load_w(chunk + 1);
    {
      const int r = 16 * warp + g;
      float* gp = Vnh + (static_cast<size_t>(chunk) * C + r) * dv + c0 + 2 * t;
#pragma unroll
      for (int n = 0; n < kScanNT; ++n) {
        const float2 lo = make_float2(ua[0][n].x - (vacc[0][n][0] + vacc[1][n][0]),
                                      ua[0][n].y - (vacc[0][n][1] + vacc[1][n][1]));
        const float2 hi = make_float2(ua[1][n].x - (vacc[0][n][2] + vacc[1][n][2]),
                                      ua[1][n].y - (vacc[0][n][3] + vacc[1][n][3]));
        *reinterpret_cast<float2*>(&Vs[r][8 * n + 2 * t]) = lo;
        *reinterpret_cast<float2*>(&Vs[r + 8][8 * n + 2 * t]) = hi;
        *reinterpret_cast<float2*>(gp + 8 * n) = lo;
        *reinterpret_cast<float2*>(gp + 8 * dv + 8 * n) = hi;
      }
    }
    if (chunk + 1 < nC) load_u(chunk + 1);
    __syncthreads();
    // 3. S = e^{gamma_C} S + KT Vn
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const int mt = warp + kScanWarps * mi;
      if (mt >= kgs) continue;
#pragma unroll
      for (int n = 0; n < kScanNT; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) sacc[mi][n][i] *= egl;
#pragma unroll
      for (int kg = 0; kg < C / 16; ++kg) {
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const float a[4] = {
              s ? ka[mi][kg][0].z : ka[mi][kg][0].x, s ? ka[mi][kg][1].z : ka[mi][kg][1].x,
              s ? ka[mi][kg][0].w : ka[mi][kg][0].y, s ? ka[mi][kg][1].w : ka[mi][kg][1].y};
          const int k0 = 16 * kg + 4 * t + 2 * s;
#pragma unroll
          for (int n = 0; n < kScanNT; ++n) {
            const float b[2] = {Vs[k0][8 * n + g], Vs[k0 + 1][8 * n + g]};
            mma3(sacc[mi][n], a, b);
          }
        }
      }
    }
    if (chunk + 1 < nC) load_k(chunk + 1);
  }
}

// ---- output: grid (nC, Hv). Shared: Qs [C][ldq] (Q, then O), Ks [C][ldq] (K, then Vn), Ps
// [C][C+8], Hs [dk][dv+8], gam [C].
template <typename E>
__global__ void __launch_bounds__(kThreads, 1)
    output_kernel(const float* __restrict__ q, const float* __restrict__ k, int T, int Tc, int Hk,
                  int Hv, int dk, int dv, Ws ws, E* __restrict__ o) {
  extern __shared__ __align__(128) float smem[];
  const int chunk = blockIdx.x, h = blockIdx.y, kh = h / (Hv / Hk), nC = Tc / C;
  const int t0 = chunk * C, valid = min(C, T - t0);
  const int ldq = max(dk, dv) + 8, ldh = dv + 8, ldp = C + 8;
  float* Qs = smem;
  float* Ks = Qs + C * ldq;
  float* Ps = Ks + C * ldq;
  float* Hs = Ps + C * ldp;
  float* gam = Hs + dk * ldh;
  const int tid = threadIdx.x, warp = tid / 32;
  const size_t row0 = static_cast<size_t>(h) * Tc + t0;

  load_tiles(Qs, ldq, q + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk,
             dk, Ks, ldq, k + (static_cast<size_t>(t0) * Hk + kh) * dk,
             static_cast<size_t>(Hk) * dk, dk, valid);
  {
    const float* hg = ws.H + (static_cast<size_t>(h) * nC + chunk) * dk * dv;
    const int n4 = dk * dv / 4;
#pragma unroll 4
    for (int e = tid; e < n4; e += kThreads) {
      const float4 x = ldg4(hg + 4 * e);
      float* d = Hs + (4 * e / dv) * ldh + (4 * e) % dv;
      d[0] = x.x, d[1] = x.y, d[2] = x.z, d[3] = x.w;
    }
  }
  if (tid < C) gam[tid] = ws.G[row0 + tid];
  __syncthreads();
  for (int tile = warp; tile < 16; tile += kThreads / 32) {  // Q K^T, lower tiles only
    const int tm = tile / 4, tn = tile % 4;
    if (tn > tm) continue;
    FragC acc;
    wm::fill_fragment(acc, 0.0f);
    mma_rows<true>(acc, Qs + tm * 16 * ldq, ldq, Ks + tn * 16 * ldq, ldq, dk);
    wm::store_matrix_sync(Ps + tm * 16 * ldp + tn * 16, acc, ldp, wm::mem_row_major);
  }
  __syncthreads();
  for (int e = tid; e < C * C; e += kThreads) {
    const int i = e / C, j = e % C;
    Ps[i * ldp + j] = i >= j ? Ps[i * ldp + j] * expf(gam[i] - gam[j]) : 0.0f;
  }
  for (int e = tid; e < C * dk; e += kThreads) {
    const int i = e / dk, d = e % dk;
    Qs[i * ldq + d] *= expf(gam[i]);
  }
  load_tile(Ks, ldq, ws.Vn + row0 * dv, dv, dv, C);
  __syncthreads();
  // O = (e^gamma Q) S + P Vn; tile = warp + 8 r, m-tile = tile % 4 (balances the triangular P).
  const int ntiles = 4 * (dv / 16);
  FragC acc[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int tile = warp + 8 * r;
    if (tile >= ntiles) continue;
    const int tm = tile % 4, tn = tile / 4;
    wm::fill_fragment(acc[r], 0.0f);
    mma_rows<false>(acc[r], Qs + tm * 16 * ldq, ldq, Hs + tn * 16, ldh, dk);
    mma_rows<false>(acc[r], Ps + tm * 16 * ldp, ldp, Ks + tn * 16, ldq, 16 * (tm + 1));
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int tile = warp + 8 * r;
    if (tile >= ntiles) continue;
    const int tm = tile % 4, tn = tile / 4;
    wm::store_matrix_sync(Qs + tm * 16 * ldq + tn * 16, acc[r], ldq, wm::mem_row_major);
  }
  __syncthreads();
  for (int e = tid; e < valid * dv; e += kThreads) {
    const int i = e / dv, c = e % dv;
    o[(static_cast<size_t>(t0 + i) * Hv + h) * dv + c] = from_f<E>(Qs[i * ldq + c]);
  }
}

size_t prep_smem(int dk, int dv) {
  return sizeof(float) * (static_cast<size_t>(C) * (dk + 8) + static_cast<size_t>(C) * (dv + 8) +
                          2 * C * (C + 8) + 3 * 256 + 2 * C);
}
size_t output_smem(int dk, int dv) {
  const size_t ldq = std::max(dk, dv) + 8;
  return sizeof(float) * (2 * C * ldq + C * (C + 8) + static_cast<size_t>(dk) * (dv + 8) + C);
}

}  // namespace

bool tc_supported(int dk, int dv) {
  return dk % 16 == 0 && dv % 16 == 0 && dk >= 16 && dv >= 16 && dk <= kMaxHeadDim &&
         dv <= kMaxHeadDim;
}

size_t tc_workspace_floats(int Tc, int Hv, int dk, int dv) {
  const size_t rows = static_cast<size_t>(Hv) * Tc, nC = Tc / C;
  return rows * (2 * dk + 2 * dv + 1) + static_cast<size_t>(Hv) * nC * dk * dv;
}

void chunked_tc(const float* q, const float* k, const float* v, const float* g, const float* beta,
                int T, int Hk, int Hv, int dk, int dv, __nv_bfloat16* o, float* workspace,
                cudaStream_t s, cudaEvent_t between) {
  const int Tc = (T + C - 1) / C * C, nC = Tc / C;
  const Ws ws = carve(workspace, Tc, Hv, dk, dv);
  const size_t ps = prep_smem(dk, dv), os = output_smem(dk, dv);
  CLEF_CUDA_CHECK(cudaFuncSetAttribute(prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(ps)));
  CLEF_CUDA_CHECK(cudaFuncSetAttribute(output_kernel<__nv_bfloat16>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(os)));
  prep_kernel<<<dim3(nC, Hv), kThreads, ps, s>>>(k, v, g, beta, T, Tc, Hk, Hv, dk, dv, ws);
  CLEF_CUDA_LAUNCH_CHECK();
  if (between) CLEF_CUDA_CHECK(cudaEventRecord(between, s));
  scan_kernel<<<dim3(dv / kScanBV, Hv), kScanWarps * 32, 0, s>>>(Tc, dk, dv, ws);
  CLEF_CUDA_LAUNCH_CHECK();
  output_kernel<__nv_bfloat16>
      <<<dim3(nC, Hv), kThreads, os, s>>>(q, k, T, Tc, Hk, Hv, dk, dv, ws, o);
  CLEF_CUDA_LAUNCH_CHECK();
}

}  // namespace clef::engine::cuda::gdn

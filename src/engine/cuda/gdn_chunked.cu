// Chunked gated delta rule (see gdn_chunked.h). Notation of spec/gpu.md §4.1 with C = 64:
//   gamma_i = sum_{j<=i} g_j (in-chunk), A_ij = beta_i (k_i.k_j) e^{gamma_i-gamma_j} (i > j),
//   Tm = (I + A)^-1, W = Tm diag(beta e^gamma) K, U = Tm diag(beta) V,
//   Vn = U - W S, O = diag(e^gamma) Q S + ((Q K^T) o Gamma_incl) Vn,
//   S' = e^{gamma_C} S + K^T diag(e^{gamma_C - gamma}) Vn.
// Positions past T are loaded as k = v = q = 0, g = beta = 0, so they neither move the state nor
// are written.
#include <mma.h>

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/gdn_chunked.h"

namespace clef::engine::cuda {
namespace {

constexpr int C = kGdnChunk;
constexpr int kThreads = 256;
constexpr int kMaxHeadDim = 128;
constexpr int kBV = 16;  // value columns per CTA of the sequential kernel

struct Workspace {
  float* W;
  float* U;
  float* P;
  float* G;
};

Workspace carve(void* ws, int Tc, int Hv, int dk, int dv) {
  float* p = static_cast<float*>(ws);
  Workspace w;
  w.W = p;
  p += static_cast<size_t>(Hv) * Tc * dk;
  w.U = p;
  p += static_cast<size_t>(Hv) * Tc * dv;
  w.P = p;
  p += static_cast<size_t>(Hv) * Tc * C;
  w.G = p;
  return w;
}

constexpr int kMaxVec =
    C * kMaxHeadDim / 4 / kThreads;  // float4 loads per thread for one 64-row tile

// Copies two 64-row fp32 tiles from global memory into padded shared arrays with every load in
// flight at once (one memory latency per tile pair, not one per row). Row i of tile X is at srcX +
// i * strideX (colsX contiguous floats, colsX % 4 == 0); rows at or past `valid` read as zero.
__device__ __forceinline__ void load_tiles(float* __restrict__ dstA, int ldA,
                                           const float* __restrict__ srcA, size_t strideA,
                                           int colsA, float* __restrict__ dstB, int ldB,
                                           const float* __restrict__ srcB, size_t strideB,
                                           int colsB, int valid) {
  const int a4 = colsA / 4, b4 = colsB / 4;
  float4 va[kMaxVec], vb[kMaxVec];
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int r = 0; r < kMaxVec; ++r) {
    const int e = threadIdx.x + r * kThreads;
    const int ia = e / a4, ib = e / b4;
    va[r] = (e < C * a4 && ia < valid)
                ? __ldg(reinterpret_cast<const float4*>(srcA + ia * strideA + (e % a4) * 4))
                : zero;
    vb[r] = (e < C * b4 && ib < valid)
                ? __ldg(reinterpret_cast<const float4*>(srcB + ib * strideB + (e % b4) * 4))
                : zero;
  }
#pragma unroll
  for (int r = 0; r < kMaxVec; ++r) {
    const int e = threadIdx.x + r * kThreads;
    if (e < C * a4) {
      float* d = dstA + (e / a4) * ldA + (e % a4) * 4;
      d[0] = va[r].x, d[1] = va[r].y, d[2] = va[r].z, d[3] = va[r].w;
    }
    if (e < C * b4) {
      float* d = dstB + (e / b4) * ldB + (e % b4) * 4;
      d[0] = vb[r].x, d[1] = vb[r].y, d[2] = vb[r].z, d[3] = vb[r].w;
    }
  }
}

// One tile, as load_tiles.
__device__ __forceinline__ void load_tile(float* __restrict__ dst, int ld,
                                          const float* __restrict__ src, size_t stride, int cols,
                                          int valid) {
  const int c4 = cols / 4;
  float4 v[kMaxVec];
#pragma unroll
  for (int r = 0; r < kMaxVec; ++r) {
    const int e = threadIdx.x + r * kThreads, i = e / c4;
    v[r] = (e < C * c4 && i < valid)
               ? __ldg(reinterpret_cast<const float4*>(src + i * stride + (e % c4) * 4))
               : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int r = 0; r < kMaxVec; ++r) {
    const int e = threadIdx.x + r * kThreads;
    if (e < C * c4) {
      float* d = dst + (e / c4) * ld + (e % c4) * 4;
      d[0] = v[r].x, d[1] = v[r].y, d[2] = v[r].z, d[3] = v[r].w;
    }
  }
}

// grid (n_chunks, Hv). Shared: Ks [C][dk+1], Xs [C][max(dk,dv)+1] (V, then Q), Am, Tm [C][C+1],
// gam, bet.
__global__ void __launch_bounds__(kThreads)
    gdn_chunk_prep_kernel(const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, const float* __restrict__ g,
                          const float* __restrict__ beta, int T, int Tc, int Hk, int Hv, int dk,
                          int dv, Workspace ws) {
  extern __shared__ float smem[];
  const int chunk = blockIdx.x, h = blockIdx.y, kh = h / (Hv / Hk);
  const int t0 = chunk * C, valid = min(C, T - t0);
  const int ldk = dk + 1, ldx = max(dk, dv) + 1, lda = C + 1;
  float* Ks = smem;
  float* Xs = Ks + C * ldk;
  float* Am = Xs + C * ldx;
  float* Tm = Am + C * lda;
  float* gam = Tm + C * lda;
  float* bet = gam + C;
  const int tid = threadIdx.x;

  load_tiles(Ks, ldk, k + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk,
             dk, Xs, ldx, v + (static_cast<size_t>(t0) * Hv + h) * dv, static_cast<size_t>(Hv) * dv,
             dv, valid);
  if (tid < C) {
    gam[tid] = tid < valid ? g[static_cast<size_t>(t0 + tid) * Hv + h] : 0.0f;
    bet[tid] = tid < valid ? beta[static_cast<size_t>(t0 + tid) * Hv + h] : 0.0f;
  }
  __syncthreads();
  if (tid < 32) {  // inclusive prefix sum of g over the chunk (one warp, two values per lane)
    const float a0 = gam[2 * tid], a1 = gam[2 * tid + 1];
    float s = a0 + a1;
    for (int o = 1; o < 32; o <<= 1) {
      const float n = __shfl_up_sync(0xffffffffu, s, o);
      if (tid >= o) s += n;
    }
    const float excl = s - (a0 + a1);
    gam[2 * tid] = excl + a0;
    gam[2 * tid + 1] = excl + a0 + a1;
  }
  __syncthreads();
  // A (strictly lower) and Tm = I.
  for (int e = tid; e < C * C; e += kThreads) {
    const int i = e / C, j = e % C;
    float a = 0.0f;
    if (i > j) {
      float dot = 0.0f;
      for (int d = 0; d < dk; ++d) dot += Ks[i * ldk + d] * Ks[j * ldk + d];
      a = bet[i] * dot * expf(gam[i] - gam[j]);
    }
    Am[i * lda + j] = a;
    Tm[i * lda + j] = i == j ? 1.0f : 0.0f;
  }
  __syncthreads();
  // (I + A) Tm = I by column sweep: once row m is final, subtract its contribution from every later
  // row. 63 short parallel steps instead of a 64-deep chain of dot products.
  for (int m = 0; m < C - 1; ++m) {
    const int w = m + 1, n = (C - 1 - m) * w;
    for (int e = tid; e < n; e += kThreads) {
      const int i = m + 1 + e / w, j = e % w;
      Tm[i * lda + j] -= Am[i * lda + m] * Tm[m * lda + j];
    }
    __syncthreads();
  }
  // Am <- Tm diag(beta e^gamma), Tm <- Tm diag(beta) (lower triangles only; e^gamma <= 1).
  for (int e = tid; e < C * C; e += kThreads) {
    const int i = e / C, j = e % C;
    const float t = j <= i ? Tm[i * lda + j] : 0.0f;
    Am[i * lda + j] = t * bet[j] * expf(gam[j]);
    Tm[i * lda + j] = t * bet[j];
  }
  __syncthreads();
  const size_t row0 = static_cast<size_t>(h) * Tc + t0;
  for (int e = tid; e < C * dk; e += kThreads) {  // W = Am K
    const int i = e / dk, d = e % dk;
    float s = 0.0f;
    for (int j = 0; j <= i; ++j) s += Am[i * lda + j] * Ks[j * ldk + d];
    ws.W[(row0 + i) * dk + d] = s;
  }
  for (int e = tid; e < C * dv; e += kThreads) {  // U = Tm V
    const int i = e / dv, d = e % dv;
    float s = 0.0f;
    for (int j = 0; j <= i; ++j) s += Tm[i * lda + j] * Xs[j * ldx + d];
    ws.U[(row0 + i) * dv + d] = s;
  }
  __syncthreads();
  load_tile(Xs, ldx, q + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk, dk,
            valid);
  __syncthreads();
  // P = (Q K^T) o Gamma, lower triangle including the diagonal.
  for (int e = tid; e < C * C; e += kThreads) {
    const int i = e / C, j = e % C;
    float p = 0.0f;
    if (i >= j) {
      float dot = 0.0f;
      for (int d = 0; d < dk; ++d) dot += Xs[i * ldx + d] * Ks[j * ldk + d];
      p = dot * expf(gam[i] - gam[j]);
    }
    ws.P[(row0 + i) * C + j] = p;
  }
  if (tid < C) ws.G[row0 + tid] = gam[tid];
}

// grid (ceil(dv / kBV), Hv): sequential over chunks. Shared: S [dk][kBV], As/Bs [C][dk+1] (W and Q,
// then K and P), Vn [C][kBV+1], gam [C].
template <typename E>
__global__ void __launch_bounds__(kThreads, 2)
    gdn_chunk_scan_kernel(const float* __restrict__ q, const float* __restrict__ k, int T, int Tc,
                          int Hk, int Hv, int dk, int dv, Workspace ws, E* __restrict__ o) {
  extern __shared__ float smem[];
  const int h = blockIdx.y, kh = h / (Hv / Hk), c0 = blockIdx.x * kBV;
  const int ldk = dk + 1, ldp = C + 1, ldv = kBV + 1;
  const int bufsz = C * max(ldk, ldp);
  float* S = smem;
  float* As = S + kMaxHeadDim * kBV;
  float* Bs = As + bufsz;
  float* Vn = Bs + bufsz;
  float* gam = Vn + C * ldv;
  const int tid = threadIdx.x;
  const int n_chunks = Tc / C;
  for (int e = tid; e < dk * kBV; e += kThreads) S[e] = 0.0f;

  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    const int t0 = chunk * C, valid = min(C, T - t0);
    const size_t row0 = static_cast<size_t>(h) * Tc + t0;
    __syncthreads();  // previous chunk's readers of As/Bs/S are done
    load_tiles(As, ldk, ws.W + row0 * dk, dk, dk, Bs, ldk,
               q + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk, dk,
               valid);
    if (tid < C) gam[tid] = ws.G[row0 + tid];
    __syncthreads();
    // Vn = U - W S and QS = e^gamma Q S; thread -> (row i, 4 columns).
    constexpr int kRows = C * (kBV / 4) / kThreads;
    float qs[kRows][4];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int e = tid + r * kThreads, i = e / (kBV / 4), cb = (e % (kBV / 4)) * 4;
      float u[4];
#pragma unroll
      for (int c = 0; c < 4; ++c)
        u[c] = c0 + cb + c < dv ? ws.U[(row0 + i) * dv + c0 + cb + c] : 0.0f;
      float ws4[4] = {0, 0, 0, 0}, qs4[4] = {0, 0, 0, 0};
#pragma unroll 4
      for (int d = 0; d < dk; ++d) {
        const float w = As[i * ldk + d], qq = Bs[i * ldk + d];
        const float4 s4 = *reinterpret_cast<const float4*>(&S[d * kBV + cb]);
        ws4[0] += w * s4.x, ws4[1] += w * s4.y, ws4[2] += w * s4.z, ws4[3] += w * s4.w;
        qs4[0] += qq * s4.x, qs4[1] += qq * s4.y, qs4[2] += qq * s4.z, qs4[3] += qq * s4.w;
      }
      const float eg = expf(gam[i]);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        Vn[i * ldv + cb + c] = u[c] - ws4[c];
        qs[r][c] = eg * qs4[c];
      }
    }
    __syncthreads();
    load_tiles(As, ldk, k + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk,
               dk, Bs, ldp, ws.P + row0 * C, C, C, valid);
    __syncthreads();
    // O = QS + P Vn
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int e = tid + r * kThreads, i = e / (kBV / 4), cb = (e % (kBV / 4)) * 4;
      float acc[4] = {qs[r][0], qs[r][1], qs[r][2], qs[r][3]};
      for (int j = 0; j <= i; ++j) {
        const float p = Bs[i * ldp + j];
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[c] += p * Vn[j * ldv + cb + c];
      }
      if (i < valid) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int col = c0 + cb + c;
          if (col < dv) o[(static_cast<size_t>(t0 + i) * Hv + h) * dv + col] = from_f<E>(acc[c]);
        }
      }
    }
    // S' = e^{gamma_C} S + K^T diag(e^{gamma_C - gamma}) Vn; thread -> (row d, 8 columns).
    const float gl = gam[C - 1];
    const float egl = expf(gl);
    for (int e = tid; e < dk * (kBV / 8); e += kThreads) {
      const int d = e / (kBV / 8), cb = (e % (kBV / 8)) * 8;
      float acc[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[c] = egl * S[d * kBV + cb + c];
      for (int j = 0; j < C; ++j) {
        const float kd = As[j * ldk + d] * expf(gl - gam[j]);
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[c] += kd * Vn[j * ldv + cb + c];
      }
#pragma unroll
      for (int c = 0; c < 8; ++c) S[d * kBV + cb + c] = acc[c];
    }
  }
}

// ---- Tensor-core variant (bf16 engine): the chunk-local matmuls on TF32 wmma (m16n16k8, fp32
// accumulate), the state and every reduction outside the matmuls in fp32. FLA rounds the same
// operands to bf16, so TF32 is within the bf16 engine's budget; the float32 engine keeps the SIMT
// kernels above. Needs dk, dv % 16 == 0.
namespace wm = nvcuda::wmma;
using FragA = wm::fragment<wm::matrix_a, 16, 16, 8, wm::precision::tf32, wm::row_major>;
using FragAc = wm::fragment<wm::matrix_a, 16, 16, 8, wm::precision::tf32, wm::col_major>;
using FragB = wm::fragment<wm::matrix_b, 16, 16, 8, wm::precision::tf32, wm::row_major>;
using FragBc = wm::fragment<wm::matrix_b, 16, 16, 8, wm::precision::tf32, wm::col_major>;
using FragC = wm::fragment<wm::accumulator, 16, 16, 8, float>;

// 3xTF32: x = hi + lo with both halves TF32, and a b ~= a_hi b_hi + a_hi b_lo + a_lo b_hi, which
// keeps the products at about fp32 accuracy (plain TF32 made the bf16 engine noisier than the
// reference's bf16 run, whose GDN core is fp32).
template <typename F>
__device__ __forceinline__ void split_tf32(F& hi, F& lo) {
#pragma unroll
  for (int t = 0; t < hi.num_elements; ++t) {
    const float x = hi.x[t];
    hi.x[t] = wm::__float_to_tf32(x);
    lo.x[t] = wm::__float_to_tf32(x - hi.x[t]);
  }
}
template <typename FA, typename FB>
__device__ __forceinline__ void mma3(FragC& acc, FA& a, FB& b) {
  FA alo;
  FB blo;
  split_tf32(a, alo);
  split_tf32(b, blo);
  wm::mma_sync(acc, alo, b, acc);
  wm::mma_sync(acc, a, blo, acc);
  wm::mma_sync(acc, a, b, acc);
}

// acc += A[16 x K] B[K x 16]; A row-major (lda), B row-major (ldb) or, with BT, B[k][n] at b[n *
// ldb + k].
template <bool BT>
__device__ __forceinline__ void mma_rows(FragC& acc, const float* a, int lda, const float* b,
                                         int ldb, int K) {
  for (int kk = 0; kk < K; kk += 8) {
    FragA fa;
    wm::load_matrix_sync(fa, a + kk, lda);
    if constexpr (BT) {
      FragBc fb;
      wm::load_matrix_sync(fb, b + kk, ldb);
      mma3(acc, fa, fb);
    } else {
      FragB fb;
      wm::load_matrix_sync(fb, b + static_cast<size_t>(kk) * ldb, ldb);
      mma3(acc, fa, fb);
    }
  }
}

__global__ void __launch_bounds__(kThreads, 2)
    gdn_chunk_prep_tc_kernel(const float* __restrict__ q, const float* __restrict__ k,
                             const float* __restrict__ v, const float* __restrict__ g,
                             const float* __restrict__ beta, int T, int Tc, int Hk, int Hv, int dk,
                             int dv, Workspace ws) {
  extern __shared__ __align__(128) float smem_tc[];
  const int chunk = blockIdx.x, h = blockIdx.y, kh = h / (Hv / Hk);
  const int t0 = chunk * C, valid = min(C, T - t0);
  const int ldk = dk + 8, ldx = max(dk, dv) + 8, lda = C + 8;
  float* Ks = smem_tc;
  float* Xs = Ks + C * ldk;
  float* Am = Xs + C * ldx;
  float* Tm = Am + C * lda;
  float* gam = Tm + C * lda;
  float* bet = gam + C;
  const int tid = threadIdx.x, warp = tid / 32;

  load_tiles(Ks, ldk, k + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk,
             dk, Xs, ldx, v + (static_cast<size_t>(t0) * Hv + h) * dv, static_cast<size_t>(Hv) * dv,
             dv, valid);
  if (tid < C) {
    gam[tid] = tid < valid ? g[static_cast<size_t>(t0 + tid) * Hv + h] : 0.0f;
    bet[tid] = tid < valid ? beta[static_cast<size_t>(t0 + tid) * Hv + h] : 0.0f;
  }
  __syncthreads();
  if (tid < 32) {
    const float a0 = gam[2 * tid], a1 = gam[2 * tid + 1];
    float s = a0 + a1;
    for (int o = 1; o < 32; o <<= 1) {
      const float n = __shfl_up_sync(0xffffffffu, s, o);
      if (tid >= o) s += n;
    }
    const float excl = s - (a0 + a1);
    gam[2 * tid] = excl + a0;
    gam[2 * tid + 1] = excl + a0 + a1;
  }
  for (int tile = warp; tile < 16; tile += kThreads / 32) {  // K K^T
    const int tm = tile / 4, tn = tile % 4;
    FragC acc;
    wm::fill_fragment(acc, 0.0f);
    mma_rows<true>(acc, Ks + tm * 16 * ldk, ldk, Ks + tn * 16 * ldk, ldk, dk);
    wm::store_matrix_sync(Am + tm * 16 * lda + tn * 16, acc, lda, wm::mem_row_major);
  }
  __syncthreads();
  for (int e = tid; e < C * C; e += kThreads) {
    const int i = e / C, j = e % C;
    Am[i * lda + j] = i > j ? bet[i] * Am[i * lda + j] * expf(gam[i] - gam[j]) : 0.0f;
    Tm[i * lda + j] = i == j ? 1.0f : 0.0f;
  }
  __syncthreads();
  for (int m = 0; m < C - 1; ++m) {  // (I + A) Tm = I, column sweep in fp32
    const int w = m + 1, n = (C - 1 - m) * w;
    for (int e = tid; e < n; e += kThreads) {
      const int i = m + 1 + e / w, j = e % w;
      Tm[i * lda + j] -= Am[i * lda + m] * Tm[m * lda + j];
    }
    __syncthreads();
  }
  for (int e = tid; e < C * C; e += kThreads) {
    const int i = e / C, j = e % C;
    const float t = j <= i ? Tm[i * lda + j] : 0.0f;
    Am[i * lda + j] = t * bet[j] * expf(gam[j]);
    Tm[i * lda + j] = t * bet[j];
  }
  __syncthreads();
  const size_t row0 = static_cast<size_t>(h) * Tc + t0;
  const int nw = 4 * (dk / 16), nu = 4 * (dv / 16);
  for (int tile = warp; tile < nw + nu; tile += kThreads / 32) {  // W = Am K, U = Tm V
    const bool is_w = tile < nw;
    const int t = is_w ? tile : tile - nw, tm = t % 4, tn = t / 4;
    FragC acc;
    wm::fill_fragment(acc, 0.0f);
    if (is_w) {
      mma_rows<false>(acc, Am + tm * 16 * lda, lda, Ks + tn * 16, ldk, C);
      wm::store_matrix_sync(ws.W + (row0 + tm * 16) * dk + tn * 16, acc, dk, wm::mem_row_major);
    } else {
      mma_rows<false>(acc, Tm + tm * 16 * lda, lda, Xs + tn * 16, ldx, C);
      wm::store_matrix_sync(ws.U + (row0 + tm * 16) * dv + tn * 16, acc, dv, wm::mem_row_major);
    }
  }
  __syncthreads();
  load_tile(Xs, ldx, q + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk, dk,
            valid);
  __syncthreads();
  for (int tile = warp; tile < 16; tile += kThreads / 32) {  // Q K^T
    const int tm = tile / 4, tn = tile % 4;
    FragC acc;
    wm::fill_fragment(acc, 0.0f);
    mma_rows<true>(acc, Xs + tm * 16 * ldx, ldx, Ks + tn * 16 * ldk, ldk, dk);
    wm::store_matrix_sync(Am + tm * 16 * lda + tn * 16, acc, lda, wm::mem_row_major);
  }
  __syncthreads();
  for (int e = tid; e < C * C; e += kThreads) {
    const int i = e / C, j = e % C;
    ws.P[(row0 + i) * C + j] = i >= j ? Am[i * lda + j] * expf(gam[i] - gam[j]) : 0.0f;
  }
  if (tid < C) ws.G[row0 + tid] = gam[tid];
}

constexpr int kBVt = 16;  // value columns per CTA of the tensor-core scan

template <typename E>
__global__ void __launch_bounds__(kThreads, 2)
    gdn_chunk_scan_tc_kernel(const float* __restrict__ q, const float* __restrict__ k, int T,
                             int Tc, int Hk, int Hv, int dk, int dv, Workspace ws,
                             E* __restrict__ o) {
  extern __shared__ __align__(128) float smem_tc[];
  const int h = blockIdx.y, kh = h / (Hv / Hk), c0 = blockIdx.x * kBVt;
  const int ldk = dk + 8, ldp = C + 8, ldv = kBVt + 8;
  const int bufsz = C * max(ldk, ldp);
  float* S = smem_tc;  // [dk][16]
  float* As = S + kMaxHeadDim * kBVt;
  float* Bs = As + bufsz;
  float* Vn = Bs + bufsz;
  float* V2 = Vn + C * ldv;
  float* Os = V2 + C * ldv;
  float* gam = Os + C * ldv;
  const int tid = threadIdx.x, warp = tid / 32;
  const int n_chunks = Tc / C;
  for (int e = tid; e < dk * kBVt; e += kThreads) S[e] = 0.0f;

  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    const int t0 = chunk * C, valid = min(C, T - t0);
    const size_t row0 = static_cast<size_t>(h) * Tc + t0;
    __syncthreads();
    load_tiles(As, ldk, ws.W + row0 * dk, dk, dk, Bs, ldk,
               q + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk, dk,
               valid);
    if (tid < C) gam[tid] = ws.G[row0 + tid];
    __syncthreads();
    {  // warps 0-3: W S -> Vn; warps 4-7: Q S -> Os
      const int tm = warp % 4;
      FragC acc;
      wm::fill_fragment(acc, 0.0f);
      mma_rows<false>(acc, (warp < 4 ? As : Bs) + tm * 16 * ldk, ldk, S, kBVt, dk);
      wm::store_matrix_sync((warp < 4 ? Vn : Os) + tm * 16 * ldv, acc, ldv, wm::mem_row_major);
    }
    __syncthreads();
    const float gl = gam[C - 1];
    for (int e = tid; e < C * kBVt; e += kThreads) {
      const int i = e / kBVt, c = e % kBVt;
      const float vn = ws.U[(row0 + i) * dv + c0 + c] - Vn[i * ldv + c];
      Vn[i * ldv + c] = vn;
      V2[i * ldv + c] = vn * expf(gl - gam[i]);
      Os[i * ldv + c] *= expf(gam[i]);
    }
    load_tiles(As, ldk, k + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk,
               dk, Bs, ldp, ws.P + row0 * C, C, C, valid);
    __syncthreads();
    if (warp < 4) {  // O = QS + P Vn
      FragC acc;
      wm::load_matrix_sync(acc, Os + warp * 16 * ldv, ldv, wm::mem_row_major);
      mma_rows<false>(acc, Bs + warp * 16 * ldp, ldp, Vn, ldv, C);
      wm::store_matrix_sync(Os + warp * 16 * ldv, acc, ldv, wm::mem_row_major);
    } else {  // S = e^{gamma_C} S + K^T V2
      const float egl = expf(gl);
      for (int dt = warp - 4; dt < dk / 16; dt += 4) {
        FragC acc;
        wm::load_matrix_sync(acc, S + dt * 16 * kBVt, kBVt, wm::mem_row_major);
#pragma unroll
        for (int t = 0; t < acc.num_elements; ++t) acc.x[t] *= egl;
        for (int kk = 0; kk < C; kk += 8) {
          FragAc fa;  // K^T: element (d, j) at As[j * ldk + d]
          wm::load_matrix_sync(fa, As + kk * ldk + dt * 16, ldk);
          FragB fb;
          wm::load_matrix_sync(fb, V2 + kk * ldv, ldv);
          mma3(acc, fa, fb);
        }
        wm::store_matrix_sync(S + dt * 16 * kBVt, acc, kBVt, wm::mem_row_major);
      }
    }
    __syncthreads();
    for (int e = tid; e < C * kBVt; e += kThreads) {
      const int i = e / kBVt, c = e % kBVt;
      if (i < valid)
        o[(static_cast<size_t>(t0 + i) * Hv + h) * dv + c0 + c] = from_f<E>(Os[i * ldv + c]);
    }
  }
}

size_t prep_tc_smem(int dk, int dv) {
  return sizeof(float) *
         (static_cast<size_t>(C) * (dk + 8) + static_cast<size_t>(C) * (std::max(dk, dv) + 8) +
          2 * C * (C + 8) + 2 * C);
}
size_t scan_tc_smem(int dk) {
  const size_t bufsz = static_cast<size_t>(C) * std::max(dk + 8, C + 8);
  return sizeof(float) * (kMaxHeadDim * kBVt + 2 * bufsz + 3 * C * (kBVt + 8) + C);
}

size_t prep_smem(int dk, int dv) {
  return sizeof(float) *
         (static_cast<size_t>(C) * (dk + 1) + static_cast<size_t>(C) * (std::max(dk, dv) + 1) +
          2 * C * (C + 1) + 2 * C);
}
size_t scan_smem(int dk) {
  const size_t bufsz = static_cast<size_t>(C) * std::max(dk + 1, C + 1);
  return sizeof(float) * (kMaxHeadDim * kBV + 2 * bufsz + C * (kBV + 1) + C);
}

}  // namespace

size_t gdn_workspace_bytes(int T, int Hv, int dk, int dv) {
  const size_t Tc = (static_cast<size_t>(std::max(T, 1)) + C - 1) / C * C;
  return sizeof(float) * static_cast<size_t>(Hv) * Tc * (dk + dv + C + 1);
}

template <typename E>
void gdn_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int T, int Hk, int Hv, int dk, int dv, E* o, void* workspace, cudaStream_t s,
                 cudaEvent_t between) {
  if (T <= 0) return;
  if (dk > kMaxHeadDim || dv > kMaxHeadDim || dk < 1 || dv < 1)
    throw std::invalid_argument("gdn_chunked: head dims must be in [1, 128]");
  if (dk % 4 != 0 || dv % 4 != 0)
    throw std::invalid_argument("gdn_chunked: head dims must be multiples of 4");
  if (Hk <= 0 || Hv % Hk != 0)
    throw std::invalid_argument("gdn_chunked: Hv must be a multiple of Hk");
  const int Tc = (T + C - 1) / C * C;
  const Workspace ws = carve(workspace, Tc, Hv, dk, dv);
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    if (dk % 16 == 0 && dv % 16 == 0) {
      const size_t ps = prep_tc_smem(dk, dv), ss = scan_tc_smem(dk);
      CLEF_CUDA_CHECK(cudaFuncSetAttribute(gdn_chunk_prep_tc_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(ps)));
      CLEF_CUDA_CHECK(cudaFuncSetAttribute(gdn_chunk_scan_tc_kernel<E>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(ss)));
      gdn_chunk_prep_tc_kernel<<<dim3(Tc / C, Hv), kThreads, ps, s>>>(q, k, v, g, beta, T, Tc, Hk,
                                                                      Hv, dk, dv, ws);
      CLEF_CUDA_LAUNCH_CHECK();
      if (between) CLEF_CUDA_CHECK(cudaEventRecord(between, s));
      gdn_chunk_scan_tc_kernel<E>
          <<<dim3(dv / kBVt, Hv), kThreads, ss, s>>>(q, k, T, Tc, Hk, Hv, dk, dv, ws, o);
      CLEF_CUDA_LAUNCH_CHECK();
      return;
    }
  }
  const size_t ps = prep_smem(dk, dv), ss = scan_smem(dk);
  static_assert(C * (kBV / 4) % kThreads == 0, "thread mapping of the scan kernel");
  CLEF_CUDA_CHECK(cudaFuncSetAttribute(
      gdn_chunk_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(ps)));
  CLEF_CUDA_CHECK(cudaFuncSetAttribute(
      gdn_chunk_scan_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(ss)));
  gdn_chunk_prep_kernel<<<dim3(Tc / C, Hv), kThreads, ps, s>>>(q, k, v, g, beta, T, Tc, Hk, Hv, dk,
                                                               dv, ws);
  CLEF_CUDA_LAUNCH_CHECK();
  if (between) CLEF_CUDA_CHECK(cudaEventRecord(between, s));
  gdn_chunk_scan_kernel<E>
      <<<dim3((dv + kBV - 1) / kBV, Hv), kThreads, ss, s>>>(q, k, T, Tc, Hk, Hv, dk, dv, ws, o);
  CLEF_CUDA_LAUNCH_CHECK();
}

template void gdn_chunked<float>(const float*, const float*, const float*, const float*,
                                 const float*, int, int, int, int, int, float*, void*, cudaStream_t,
                                 cudaEvent_t);
template void gdn_chunked<__nv_bfloat16>(const float*, const float*, const float*, const float*,
                                         const float*, int, int, int, int, int, __nv_bfloat16*,
                                         void*, cudaStream_t, cudaEvent_t);

}  // namespace clef::engine::cuda

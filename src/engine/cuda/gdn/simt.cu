// SIMT chunked gated delta rule (see gdn/simt.h). Notation of docs/spec/gpu.md §4.1 with C = 64:
//   gamma_i = sum_{j<=i} g_j (in-chunk), A_ij = beta_i (k_i.k_j) e^{gamma_i-gamma_j} (i > j),
//   Tm = (I + A)^-1, W = Tm diag(beta e^gamma) K, U = Tm diag(beta) V,
//   Vn = U - W S, O = diag(e^gamma) Q S + ((Q K^T) o Gamma_incl) Vn,
//   S' = e^{gamma_C} S + K^T diag(e^{gamma_C - gamma}) Vn.
// Positions past T are loaded as k = v = q = 0, g = beta = 0, so they neither move the state nor
// are written.
#include "engine/cuda/gdn/simt.h"

#include <algorithm>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/gdn/tiles.cuh"

namespace clef::engine::cuda {
namespace {

using gdn::ChunkMap;
using gdn::load_tile;
using gdn::load_tiles;
constexpr int C = kGdnChunk;
constexpr int kThreads = gdn::kTileThreads;
constexpr int kMaxHeadDim = gdn::kMaxHeadDim;
static_assert(C == gdn::kChunk, "one chunk size");
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

// grid (n_chunks, Hv). Shared: Ks [C][dk+1], Xs [C][max(dk,dv)+1] (V, then Q), Am, Tm [C][C+1],
// gam, bet.
__global__ void __launch_bounds__(kThreads)
    gdn_chunk_prep_kernel(const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, const float* __restrict__ g,
                          const float* __restrict__ beta, ChunkMap map, int Tc, int Hk, int Hv,
                          int dk, int dv, Workspace ws) {
  extern __shared__ float smem[];
  const int chunk = blockIdx.x, h = blockIdx.y, kh = h / (Hv / Hk);
  int t0, valid;  // the chunk's first input row and rows
  map.chunk(chunk, t0, valid);
  if (valid <= 0) return;  // an unused slot of a packed batch
  const int ldk = dk + 1, ldx = max(dk, dv) + 1, lda = C + 1;
  float* Ks = smem;
  float* Xs = Ks + C * ldk;
  float* Am = Xs + C * ldx;
  float* Tm = Am + C * lda;
  float* gam = Tm + C * lda;
  float* bet = gam + C;
  const int tid = threadIdx.x;

  gdn::load_prep_inputs(Ks, ldk, Xs, ldx, gam, bet, k, v, g, beta, t0, valid, h, kh, Hk, Hv, dk,
                        dv);
  __syncthreads();
  gdn::chunk_cumsum(gam);
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
  const size_t row0 = static_cast<size_t>(h) * Tc + chunk * C;  // the slot's scratch rows
  for (int e = tid; e < C * dk; e += kThreads) {                // W = Am K
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

// grid (ceil(dv / kBV), Hv, sequences): sequential over one sequence's chunks. Shared: S [dk][kBV],
// As/Bs [C][dk+1] (W and Q, then K and P), Vn [C][kBV+1], gam [C].
template <typename E>
__global__ void __launch_bounds__(kThreads, 2)
    gdn_chunk_scan_kernel(const float* __restrict__ q, const float* __restrict__ k, ChunkMap map,
                          int Tc, int Hk, int Hv, int dk, int dv, Workspace ws, E* __restrict__ o) {
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
  int first, n_chunks;  // this sequence's chunk slots; it starts from S = 0
  map.sequence(blockIdx.z, Tc / C, first, n_chunks);
  for (int e = tid; e < dk * kBV; e += kThreads) S[e] = 0.0f;

  for (int chunk = first; chunk < first + n_chunks; ++chunk) {
    int t0, valid;
    map.chunk(chunk, t0, valid);
    const size_t row0 = static_cast<size_t>(h) * Tc + chunk * C;
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

namespace gdn {

size_t simt_workspace_floats(int Tc, int Hv, int dk, int dv) {
  return static_cast<size_t>(Hv) * Tc * (dk + dv + C + 1);
}

template <typename E>
void chunked_simt(const float* q, const float* k, const float* v, const float* g, const float* beta,
                  int T, int Hk, int Hv, int dk, int dv, E* o, float* workspace, cudaStream_t s,
                  cudaEvent_t between, cudaEvent_t after_scan, const GdnSequences* seqs) {
  const ChunkMap map = seqs ? ChunkMap{seqs->chunk_row0, seqs->chunk_valid, seqs->seq_chunk0, T}
                            : ChunkMap{nullptr, nullptr, nullptr, T};
  const int Tc = (seqs ? seqs->chunk_slots : (T + C - 1) / C) * C;
  const int n_seqs = seqs ? seqs->seq_slots : 1;
  const Workspace ws = carve(workspace, Tc, Hv, dk, dv);
  const size_t ps = prep_smem(dk, dv), ss = scan_smem(dk);
  static_assert(C * (kBV / 4) % kThreads == 0, "thread mapping of the scan kernel");
  CLEF_CUDA_CHECK(cudaFuncSetAttribute(
      gdn_chunk_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(ps)));
  CLEF_CUDA_CHECK(cudaFuncSetAttribute(
      gdn_chunk_scan_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(ss)));
  gdn_chunk_prep_kernel<<<dim3(Tc / C, Hv), kThreads, ps, s>>>(q, k, v, g, beta, map, Tc, Hk, Hv,
                                                               dk, dv, ws);
  CLEF_CUDA_LAUNCH_CHECK();
  if (between) CLEF_CUDA_CHECK(cudaEventRecord(between, s));
  gdn_chunk_scan_kernel<E><<<dim3((dv + kBV - 1) / kBV, Hv, n_seqs), kThreads, ss, s>>>(
      q, k, map, Tc, Hk, Hv, dk, dv, ws, o);
  CLEF_CUDA_LAUNCH_CHECK();
  if (after_scan) CLEF_CUDA_CHECK(cudaEventRecord(after_scan, s));
}

template void chunked_simt<float>(const float*, const float*, const float*, const float*,
                                  const float*, int, int, int, int, int, float*, float*,
                                  cudaStream_t, cudaEvent_t, cudaEvent_t, const GdnSequences*);
template void chunked_simt<__nv_bfloat16>(const float*, const float*, const float*, const float*,
                                          const float*, int, int, int, int, int, __nv_bfloat16*,
                                          float*, cudaStream_t, cudaEvent_t, cudaEvent_t,
                                          const GdnSequences*);

}  // namespace gdn
}  // namespace clef::engine::cuda

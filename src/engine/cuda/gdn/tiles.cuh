// Tile copies shared by the chunked-GDN kernels (gdn/simt.cu, gdn/tensor_core.cu): 64-row fp32
// tiles from global memory into padded shared arrays, every load of a thread in flight at once (one
// memory latency per tile, not one per row). Rows at or past `valid` read as zero, which is what
// makes the padded tail of the last chunk inert.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace clef::engine::cuda::gdn {

constexpr int kChunk = 64;

// Where chunk slot c's rows are and which slots a sequence owns (GdnSequences in gdn/gdn.h, as
// the kernels see it); row0 null: one sequence of T rows, chunk c at rows 64c.
struct ChunkMap {
  const int32_t* row0;
  const int32_t* valid;
  const int32_t* seq0;
  int T;
  // A packed grid whose core is chosen per pack (GdnSequences::fused): the device's choice and
  // the value this kernel's core runs for; the other core's kernels exit at once (skip_core).
  // Null: the kernel always runs.
  const int32_t* core = nullptr;
  int core_runs_if = 0;
  __device__ __forceinline__ bool core_skipped() const {
    return core && __ldg(core) != core_runs_if;
  }
  // First input row and rows of chunk slot c (rows <= 0: unused slot).
  __device__ __forceinline__ void chunk(int c, int& r0, int& rows) const {
    if (row0) {
      r0 = __ldg(row0 + c), rows = __ldg(valid + c);
    } else {
      r0 = c * kChunk, rows = min(kChunk, T - r0);
    }
  }
  // First chunk slot and chunks of sequence s (of n_slots slots in all when there is one).
  __device__ __forceinline__ void sequence(int s, int n_slots, int& c0, int& n) const {
    if (seq0) {
      c0 = __ldg(seq0 + s), n = __ldg(seq0 + s + 1) - c0;
    } else {
      c0 = 0, n = n_slots;
    }
  }
  // The sequence of rank r (of n_seqs slots) by chunk count, most chunks first, ties in slot
  // order: a grid over sequences dispatches its longest chains first, so that a long request does
  // not start after the short ones of its pack and finish last (longest-processing-time order; a
  // sequence's work and results do not depend on which block runs it). Called by every lane of a
  // full warp: lane j ranks slots j, j + 32, ... by their counts, which it broadcasts to the rest.
  __device__ __forceinline__ int longest_first(int r, int n_seqs) const {
    if (!seq0 || n_seqs <= 1) return r;
    const int lane = threadIdx.x & 31;
    int found = r;  // unreachable fallback: ranks are a permutation of the slots
    for (int base = 0; base < n_seqs; base += 32) {
      const int j = base + lane;
      const int nj = j < n_seqs ? __ldg(seq0 + j + 1) - __ldg(seq0 + j) : -1;
      int rank = 0;
      for (int b2 = 0; b2 < n_seqs; b2 += 32) {
        const int i0 = b2 + lane;
        const int ni0 = i0 < n_seqs ? __ldg(seq0 + i0 + 1) - __ldg(seq0 + i0) : -1;
        for (int k = 0; k < 32 && b2 + k < n_seqs; ++k) {
          const int ni = __shfl_sync(0xffffffffu, ni0, k), i = b2 + k;
          rank += ni > nj || (ni == nj && i < j);
        }
      }
      const unsigned hit = __ballot_sync(0xffffffffu, j < n_seqs && rank == r);
      if (hit) found = base + __ffs(hit) - 1;
    }
    return found;
  }
};
constexpr int kMaxHeadDim = 128;
constexpr int kTileThreads = 256;  // default block size of the tile copies

// Stores one float4 at dst: one 16-byte store when the destination is 16-byte aligned (ld % 4 ==
// 0 for every row), else four scalar stores (the SIMT kernels' odd strides).
__device__ __forceinline__ void put4(float* dst, const float4& v, bool vec) {
  if (vec) {
    *reinterpret_cast<float4*>(dst) = v;
  } else {
    dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
  }
}

// Two tiles at once, by a block of THREADS threads. Row i of tile X is at srcX + i * strideX (colsX
// contiguous floats, colsX % 4 == 0, 16-byte aligned) and lands at dstX + i * ldX.
template <int THREADS = kTileThreads>
__device__ __forceinline__ void load_tiles(float* __restrict__ dstA, int ldA,
                                           const float* __restrict__ srcA, size_t strideA,
                                           int colsA, float* __restrict__ dstB, int ldB,
                                           const float* __restrict__ srcB, size_t strideB,
                                           int colsB, int valid) {
  constexpr int kVec = kChunk * kMaxHeadDim / 4 / THREADS;  // float4 per thread per tile
  const int a4 = colsA / 4, b4 = colsB / 4;
  const bool va4 = ldA % 4 == 0, vb4 = ldB % 4 == 0;
  float4 va[kVec], vb[kVec];
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int r = 0; r < kVec; ++r) {
    const int e = threadIdx.x + r * THREADS;
    const int ia = e / a4, ib = e / b4;
    va[r] = (e < kChunk * a4 && ia < valid)
                ? __ldg(reinterpret_cast<const float4*>(srcA + ia * strideA + (e % a4) * 4))
                : zero;
    vb[r] = (e < kChunk * b4 && ib < valid)
                ? __ldg(reinterpret_cast<const float4*>(srcB + ib * strideB + (e % b4) * 4))
                : zero;
  }
#pragma unroll
  for (int r = 0; r < kVec; ++r) {
    const int e = threadIdx.x + r * THREADS;
    if (e < kChunk * a4) put4(dstA + (e / a4) * ldA + (e % a4) * 4, va[r], va4);
    if (e < kChunk * b4) put4(dstB + (e / b4) * ldB + (e % b4) * 4, vb[r], vb4);
  }
}

// One tile, as load_tiles.
template <int THREADS = kTileThreads>
__device__ __forceinline__ void load_tile(float* __restrict__ dst, int ld,
                                          const float* __restrict__ src, size_t stride, int cols,
                                          int valid) {
  constexpr int kVec = kChunk * kMaxHeadDim / 4 / THREADS;
  const int c4 = cols / 4;
  const bool v4 = ld % 4 == 0;
  float4 v[kVec];
#pragma unroll
  for (int r = 0; r < kVec; ++r) {
    const int e = threadIdx.x + r * THREADS, i = e / c4;
    v[r] = (e < kChunk * c4 && i < valid)
               ? __ldg(reinterpret_cast<const float4*>(src + i * stride + (e % c4) * 4))
               : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int r = 0; r < kVec; ++r) {
    const int e = threadIdx.x + r * THREADS;
    if (e < kChunk * c4) put4(dst + (e / c4) * ld + (e % c4) * 4, v[r], v4);
  }
}

// The prep kernels' inputs for the chunk starting at token t0 of value head h (key head kh): K and
// V rows into shared tiles, g and beta into gam and bet (zero past `valid`). k: [T, Hk, dk], v:
// [T, Hv, dv], g / beta: [T, Hv].
__device__ __forceinline__ void load_prep_inputs(float* Ks, int ldk, float* Vs, int ldv, float* gam,
                                                 float* bet, const float* k, const float* v,
                                                 const float* g, const float* beta, int t0,
                                                 int valid, int h, int kh, int Hk, int Hv, int dk,
                                                 int dv) {
  load_tiles(Ks, ldk, k + (static_cast<size_t>(t0) * Hk + kh) * dk, static_cast<size_t>(Hk) * dk,
             dk, Vs, ldv, v + (static_cast<size_t>(t0) * Hv + h) * dv, static_cast<size_t>(Hv) * dv,
             dv, valid);
  const int tid = threadIdx.x;
  if (tid < kChunk) {
    gam[tid] = tid < valid ? g[static_cast<size_t>(t0 + tid) * Hv + h] : 0.0f;
    bet[tid] = tid < valid ? beta[static_cast<size_t>(t0 + tid) * Hv + h] : 0.0f;
  }
}

// In-place inclusive prefix sum of the chunk's 64 log-decays, by warp 0 (two values per lane).
// Prefix i reads values 0..i only, in an order fixed by i: a sequence's rows get the same bits
// whatever follows its last row in the chunk (nothing in a pack, its bucket's padding alone; batch
// invariance). The exclusive prefix is therefore the lane below's inclusive sum, not s - (a0 +
// a1), which made an odd row count's last gamma depend on the row after it.
__device__ __forceinline__ void chunk_cumsum(float* gam) {
  const int lane = threadIdx.x;
  if (lane >= 32) return;
  const float a0 = gam[2 * lane], a1 = gam[2 * lane + 1];
  float s = a0 + a1;
  for (int o = 1; o < 32; o <<= 1) {
    const float n = __shfl_up_sync(0xffffffffu, s, o);
    if (lane >= o) s += n;
  }
  const float below = __shfl_up_sync(0xffffffffu, s, 1);
  const float first = lane == 0 ? a0 : below + a0;
  gam[2 * lane] = first;
  gam[2 * lane + 1] = first + a1;
}

}  // namespace clef::engine::cuda::gdn

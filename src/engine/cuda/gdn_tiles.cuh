// Tile copies shared by the chunked-GDN kernels (gdn_chunked.cu, gdn_tc.cu): 64-row fp32 tiles from
// global memory into padded shared arrays, every load of a thread in flight at once (one memory
// latency per tile, not one per row). Rows at or past `valid` read as zero, which is what makes the
// padded tail of the last chunk inert.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace clef::engine::cuda::gdn {

constexpr int kChunk = 64;
constexpr int kMaxHeadDim = 128;
constexpr int kTileThreads = 256;  // block size the tile copies are written for
constexpr int kMaxVec = kChunk * kMaxHeadDim / 4 / kTileThreads;  // float4 per thread per tile

// Two tiles at once. Row i of tile X is at srcX + i * strideX (colsX contiguous floats, colsX % 4
// == 0) and lands at dstX + i * ldX.
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
    const int e = threadIdx.x + r * kTileThreads;
    const int ia = e / a4, ib = e / b4;
    va[r] = (e < kChunk * a4 && ia < valid)
                ? __ldg(reinterpret_cast<const float4*>(srcA + ia * strideA + (e % a4) * 4))
                : zero;
    vb[r] = (e < kChunk * b4 && ib < valid)
                ? __ldg(reinterpret_cast<const float4*>(srcB + ib * strideB + (e % b4) * 4))
                : zero;
  }
#pragma unroll
  for (int r = 0; r < kMaxVec; ++r) {
    const int e = threadIdx.x + r * kTileThreads;
    if (e < kChunk * a4) {
      float* d = dstA + (e / a4) * ldA + (e % a4) * 4;
      d[0] = va[r].x, d[1] = va[r].y, d[2] = va[r].z, d[3] = va[r].w;
    }
    if (e < kChunk * b4) {
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
    const int e = threadIdx.x + r * kTileThreads, i = e / c4;
    v[r] = (e < kChunk * c4 && i < valid)
               ? __ldg(reinterpret_cast<const float4*>(src + i * stride + (e % c4) * 4))
               : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int r = 0; r < kMaxVec; ++r) {
    const int e = threadIdx.x + r * kTileThreads;
    if (e < kChunk * c4) {
      float* d = dst + (e / c4) * ld + (e % c4) * 4;
      d[0] = v[r].x, d[1] = v[r].y, d[2] = v[r].z, d[3] = v[r].w;
    }
  }
}

// In-place inclusive prefix sum of the chunk's 64 log-decays, by warp 0 (two values per lane).
__device__ __forceinline__ void chunk_cumsum(float* gam) {
  const int lane = threadIdx.x;
  if (lane >= 32) return;
  const float a0 = gam[2 * lane], a1 = gam[2 * lane + 1];
  float s = a0 + a1;
  for (int o = 1; o < 32; o <<= 1) {
    const float n = __shfl_up_sync(0xffffffffu, s, o);
    if (lane >= o) s += n;
  }
  const float excl = s - (a0 + a1);
  gam[2 * lane] = excl + a0;
  gam[2 * lane + 1] = excl + a0 + a1;
}

}  // namespace clef::engine::cuda::gdn

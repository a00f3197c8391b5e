// The SwiGLU-epilogue GEMM (see gemm/swiglu_gemm.h). Persistent kernel, one CTA an SM, 384
// threads: warpgroup 0 a TMA producer (one thread), two consumer warpgroups of 64 rows each running
// m64n256k16 wgmmas from 128B-swizzled K-major tiles (BK 64, 4 stages: 192 KiB); tile 128 rows x
// 256 regrouped weight rows (128 features). Tiles in bands of 16 row tiles with the weight block
// outer within a band, so a wave's A rows and weight blocks stay in L2. Two opt-in forms with the
// same products (not yet run on a GPU: perf-log v34a, v34b): the epilogue beside the next tile's
// first k-blocks, and CTA pairs multicasting the weight tile.
// Workbench: dev/cuda/gemm_swiglu.cu (against cuBLASLt + swiglu_vec8); test: tests/engine/cuda/
// swiglu_gemm_test.cpp (against a host reference).
#include "engine/cuda/gemm/swiglu_gemm.h"

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/cuda/attention/wgmma_ops.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_attributes.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/hopper_async.cuh"
#include "engine/cuda/mma_sync.cuh"

namespace clef::engine::cuda {
// Named, not anonymous: the device helpers go unused in the passes for targets without sm_90a
// features, where unused internal functions would warn.
namespace swiglu_gemm_detail {

using bf16 = __nv_bfloat16;
constexpr int BM = 128, BN = 2 * kSwigluGroup, BK = 64, kStages = 4, kBand = 16;
constexpr int kThreads = 384;
constexpr int kABytes = BM * BK * 2, kBBytes = BN * BK * 2;
constexpr size_t kSmem = size_t(kStages) * (kABytes + kBBytes) + 1024 + 2 * kStages * 8;

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// The same copy into this CTA's and its cluster partner's shared memory at the same offset (cta
// mask), each CTA's mbarrier at `bar` counting the bytes that land in it.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map, int c0,
                                                      int c1, uint32_t bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
      : "memory");
}
// An arrive on the mbarrier at the same shared-memory offset in cluster CTA `cta`.
__device__ __forceinline__ void mbar_arrive_remote(uint32_t bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of both CTAs (not warp-aligned: the producer warp's idle lanes come here apart).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// K-major tile of 128-byte rows under the 128B swizzle (TMA's CU_TENSOR_MAP_SWIZZLE_128B): 8-row
// groups 1024 bytes apart (SBO); LBO unused; the k16 step advances the start by 32 bytes.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

// Tiles in bands of kBands row tiles (or row-tile pairs), the weight block outer within a band.
template <int kBands>
struct TileOrder {
  int tm, tn;  // row tiles (ceil(M / BM)) or row-tile pairs, weight blocks (2I / BN)
  __device__ void at(int t, int& m, int& n) const {
    const int band = t / (kBands * tn), first = band * kBands;
    const int rows = min(kBands, tm - first), i = t - band * kBands * tn;
    n = i / rows;
    m = first + i % rows;
  }
};

// One consumer thread's SwiGLU outputs for its n8 tiles J0 .. J0 + NJ - 1 of both row halves.
// gate_up(q) gives the bf16-rounded (gate, up) of fragment q = 4 j + 2 half + e: gate column
// 8 j + 2 (lane % 4) + e of row row0 + 8 half (the m64n256 fragment: n8 tile j of the gate half,
// tile j + 16 of the up half). swiglu's rounding points (kernels/elementwise.cu) on the rounded
// gate_up: bf16(bf16(silu(g)) * u).
template <int J0, int NJ, typename GateUp>
__device__ __forceinline__ void swiglu_tiles(GateUp gate_up, bf16* __restrict__ out, int row0,
                                             int col0, int M, int I) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + 8 * half;
    if (row >= M) continue;
    bf16* o = out + static_cast<size_t>(row) * I + col0;
#pragma unroll
    for (int j = J0; j < J0 + NJ; ++j) {
      float r[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float2 gu = gate_up(4 * j + 2 * half + e);
        r[e] = rnd<bf16>(silu_rounded_to<bf16>(gu.x)) * gu.y;
      }
      *reinterpret_cast<__nv_bfloat162*>(o + 8 * j) = __floats2bfloat162_rn(r[0], r[1]);
    }
  }
}
// Tiles J0 .. J0 + 3 from pk, the tile's (gate, up) pairs as bf16x2 (pk[q] = fragment q's).
template <int J0>
__device__ __forceinline__ void swiglu_part(const uint32_t (&pk)[64], bf16* __restrict__ out,
                                            int row0, int col0, int M, int I) {
  swiglu_tiles<J0, 4>(
      [&](int q) {
        return make_float2(__uint_as_float(pk[q] << 16), __uint_as_float(pk[q] & 0xFFFF0000u));
      },
      out, row0, col0, M, I);
}
// Part p (0..3) of the epilogue: n8 tiles 4p .. 4p + 3 (p known at run time, the parts inlined).
__device__ __forceinline__ void swiglu_part_at(int p, const uint32_t (&pk)[64],
                                               bf16* __restrict__ out, int row0, int col0, int M,
                                               int I) {
  if (p == 0) swiglu_part<0>(pk, out, row0, col0, M, I);
  if (p == 1) swiglu_part<4>(pk, out, row0, col0, M, I);
  if (p == 2) swiglu_part<8>(pk, out, row0, col0, M, I);
  if (p == 3) swiglu_part<12>(pk, out, row0, col0, M, I);
}

// kEpi (SwigluEpilogue): Serial forms a tile's outputs after its last products while the tensor
// pipe waits; Overlapped keeps them as bf16 pairs and forms them in four parts, each after the
// next tile's first k-blocks are issued (the same values: the same operations on the same
// rounded inputs); MainloopOnly (workbench diagnostic) writes nothing.
// kPair: CTA pairs (clusters of 2) take row tiles 2 p and 2 p + 1 of the same weight block, each
// loading half of the weight tile into both CTAs (TMA multicast): per k-block 32 KiB from L2 a CTA
// instead of 48. A stage is refilled once both CTAs' consumers have released it (four arrivals on
// each CTA's `empty`); the second tile of a pair past the last row tile loads a valid row tile
// and skips its products and outputs. The products, in the same order, give the same bits.
template <int kEpi, bool kPair>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_swiglu_kernel(const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_w, bf16* __restrict__ out, int M,
                       int K, int I) {
#ifdef CLEF_WGMMA_AVAILABLE
  using namespace hopper;  // fences, waits and mbarriers (hopper_async.cuh)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* base =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t a0 = smem_addr(base), w0 = a0 + kStages * kABytes;
  const uint32_t full = w0 + kStages * kBBytes, empty = full + kStages * 8;
  const uint32_t rank = kPair ? cluster_rank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, kPair ? 4 : 2);  // one arrive a consumer warpgroup (of each CTA)
    }
    mbar_init_fence();
  }
  if constexpr (kPair)
    cluster_sync();  // the partner's barriers exist before any multicast or remote arrive
  else
    __syncthreads();
  const int row_tiles = (M + BM - 1) / BM;
  // pairs: half as many pairs a band, the same rows
  const TileOrder<kPair ? kBand / 2 : kBand> order{kPair ? (row_tiles + 1) / 2 : row_tiles,
                                                   2 * I / BN};
  const int tiles = order.tm * order.tn, kt_n = K / BK;
  const int first = kPair ? blockIdx.x / 2 : blockIdx.x, stride = kPair ? gridDim.x / 2 : gridDim.x;
  // This CTA's row tile of tile t's (m, pair or single)
  auto my_rows = [&](int m) { return kPair ? 2 * m + static_cast<int>(rank) : m; };
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      int s = 0;
      uint32_t phase = 0;
      for (int t = first; t < tiles; t += stride) {
        int tm, tn;
        order.at(t, tm, tn);
        const int rt = min(my_rows(tm), row_tiles - 1);  // a pair's missing tile: valid rows
        for (int kt = 0; kt < kt_n; ++kt) {
          mbar_wait(empty + 8 * s, phase ^ 1);
          mbar_expect_tx(full + 8 * s, kABytes + kBBytes);
          tma_load_2d(a0 + s * kABytes, &map_a, kt * BK, rt * BM, full + 8 * s);
          if constexpr (kPair)
            tma_load_2d_multicast(w0 + s * kBBytes + rank * (kBBytes / 2), &map_w, kt * BK,
                                  tn * BN + static_cast<int>(rank) * (BN / 2), full + 8 * s, 0x3);
          else
            tma_load_2d(w0 + s * kBBytes, &map_w, kt * BK, tn * BN, full + 8 * s);
          if (++s == kStages) s = 0, phase ^= 1;
        }
      }
    }
  } else {
    setmaxnreg_inc<232>();
    const int c = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const bool lead = threadIdx.x % 128 == 0;
    auto release = [&](int st) {
      mbar_arrive(empty + 8 * st);
      if constexpr (kPair) mbar_arrive_remote(empty + 8 * st, rank ^ 1);
    };
    float d[128];
    // Overlapped: the previous tile's outputs still to be formed (parts `done` .. 3), at rows
    // from prow0 and columns from pcol0.
    uint32_t pk[64];
    int done = 4, prow0 = 0, pcol0 = 0;
    int s = 0;
    uint32_t phase = 0;
    for (int t = first; t < tiles; t += stride) {
      int tm, tn;
      order.at(t, tm, tn);
      const int rt = my_rows(tm);
      // kPair: false for the partner's tile only (its stages are waited for and released)
      const bool mine = !kPair || rt < row_tiles;
      int prev = -1;
      for (int kt = 0; kt < kt_n; ++kt) {
        mbar_wait(full + 8 * s, phase);
        wgmma_fence();
        const uint32_t a = a0 + s * kABytes + c * 64 * 128, w = w0 + s * kBBytes;
        if (mine) {
#pragma unroll
          for (int kk = 0; kk < BK / 16; ++kk)
            wgmma::ss_m64n256k16(d, desc_sw128(a + 32 * kk), desc_sw128(w + 32 * kk),
                                 kt > 0 || kk > 0);
        }
        wgmma_commit();
        if constexpr (kEpi == static_cast<int>(SwigluEpilogue::Overlapped)) {
          // while this k-block's products run
          if (done < 4) swiglu_part_at(done++, pk, out, prow0, pcol0, M, I);
        }
        wgmma_wait<1>();  // the previous stage's products are done: release it
        if (prev >= 0 && lead) release(prev);
        prev = s;
        if (++s == kStages) s = 0, phase ^= 1;
      }
      wgmma_wait<0>();
      fence_regs(d);
      if (prev >= 0 && lead) release(prev);
      if (!mine) continue;
      // Fragment (j, e) of n8 tile j is row 16 warp + lane / 4 (+ 8 for e >= 2), column
      // 8 j + 2 (lane % 4) + e % 2; gate columns are tiles 0..15, up the same features in 16..31.
      const int row0 = rt * BM + c * 64 + 16 * warp + lane / 4;
      const int col0 = tn * (BN / 2) + 2 * (lane % 4);
      if constexpr (kEpi == static_cast<int>(SwigluEpilogue::Overlapped)) {
        while (done < 4) swiglu_part_at(done++, pk, out, prow0, pcol0, M, I);  // K < 4 BK
#pragma unroll
        for (int q = 0; q < 64; ++q) {
          const __nv_bfloat162 v = __floats2bfloat162_rn(d[q], d[q + 64]);  // (gate, up)
          pk[q] = *reinterpret_cast<const uint32_t*>(&v);
        }
        done = 0, prow0 = row0, pcol0 = col0;
      } else if constexpr (kEpi == static_cast<int>(SwigluEpilogue::Serial)) {
        // straight from the accumulators (the form measured in perf-log v29f-v32d)
        swiglu_tiles<0, 16>(
            [&](int q) { return make_float2(rnd<bf16>(d[q]), rnd<bf16>(d[q + 64])); }, out, row0,
            col0, M, I);
      }
    }
    if constexpr (kEpi == static_cast<int>(SwigluEpilogue::Overlapped)) {
      while (done < 4) swiglu_part_at(done++, pk, out, prow0, pcol0, M, I);
    }
  }
  // No CTA leaves while its partner may still multicast into it or arrive on its barriers.
  if constexpr (kPair) cluster_sync();
#else
  (void)map_a, (void)map_w, (void)out, (void)M, (void)K, (void)I;
  __trap();  // built without sm_90a features: swiglu_gemm_supported() says no on such builds'
             // devices
#endif
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled, through the runtime (no link against libcuda).
EncodeTiled encode_fn() {
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CLEF_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                     cudaEnableDefault, &q));
    if (!f || q != cudaDriverEntryPointSuccess)
      throw std::runtime_error("swiglu_gemm: cuTensorMapEncodeTiled is not available");
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// A row-major bf16 matrix [rows, cols] read in boxes of BK columns x box_rows rows under the 128B
// swizzle; rows past the end read as zero.
CUtensorMap tile_map(const bf16* p, int rows, int cols, int box_rows) {
  CUtensorMap m{};
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {BK, cuuint32_t(box_rows)}, elem[2] = {1, 1};
  const CUresult r =
      encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(p), dims, strides, box,
                  elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("swiglu_gemm: cuTensorMapEncodeTiled failed (" +
                             std::to_string(int(r)) + ")");
  return m;
}

}  // namespace swiglu_gemm_detail

using namespace swiglu_gemm_detail;

bool swiglu_gemm_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("CLEF_SWIGLU_GEMM");
    if (v && std::strcmp(v, "1") == 0) return true;
    if (v && std::strcmp(v, "0") == 0) return false;
    return kSwigluGemmDefault;
  }();
  return on;
}

bool swiglu_gemm_supported(int I, int K) {
  return I > 0 && K > 0 && I % kSwigluGroup == 0 && K % BK == 0 &&
         device_attribute(DeviceAttr::CcMajor) == 9 && device_attribute(DeviceAttr::CcMinor) == 0;
}

int swiglu_gemm_min_rows() {
  static const int rows = [] {
    const char* v = std::getenv("CLEF_SWIGLU_GEMM_MIN_ROWS");
    return v && *v ? std::max(1, std::atoi(v)) : 1024;
  }();
  return rows;
}

void regroup_gate_up(bf16* w, bf16* scratch, int I, int K) {
  const size_t half = size_t(I) * K, blk = size_t(kSwigluGroup) * K * 2;  // bytes a block half
  CLEF_CUDA_CHECK(cudaMemcpy(scratch, w, 2 * half * 2, cudaMemcpyDeviceToDevice));
  const int blocks = I / kSwigluGroup;
  // gate block b -> rows 2b G.., up block b -> rows (2b + 1) G..
  CLEF_CUDA_CHECK(cudaMemcpy2D(w, 2 * blk, scratch, blk, blk, blocks, cudaMemcpyDeviceToDevice));
  CLEF_CUDA_CHECK(cudaMemcpy2D(reinterpret_cast<char*>(w) + blk, 2 * blk, scratch + half, blk, blk,
                               blocks, cudaMemcpyDeviceToDevice));
  CLEF_CUDA_CHECK(cudaDeviceSynchronize());
}

SwigluEpilogue swiglu_epilogue() {
  static const SwigluEpilogue e = [] {
    const char* v = std::getenv("CLEF_SWIGLU_EPILOGUE");
    if (v && std::strcmp(v, "overlap") == 0) return SwigluEpilogue::Overlapped;
    return SwigluEpilogue::Serial;
  }();
  return e;
}

bool swiglu_pairs() {
  static const bool on = [] {
    const char* v = std::getenv("CLEF_SWIGLU_PAIRS");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

namespace {
using Kernel = void (*)(CUtensorMap, CUtensorMap, bf16*, int, int, int);

template <bool kPair>
Kernel kernel_for(SwigluEpilogue e) {
  return e == SwigluEpilogue::Serial       ? gemm_swiglu_kernel<0, kPair>
         : e == SwigluEpilogue::Overlapped ? gemm_swiglu_kernel<1, kPair>
                                           : gemm_swiglu_kernel<2, kPair>;
}

// A launch of `clusters` pairs (clusters of two CTAs) of the kernel's block and shared memory; `at`
// holds the cluster attribute the config points to.
cudaLaunchConfig_t pair_config(int clusters, cudaStream_t s, cudaLaunchAttribute& at) {
  at.id = cudaLaunchAttributeClusterDimension;
  at.val.clusterDim.x = 2, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(2 * clusters);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmem;
  cfg.stream = s;
  cfg.attrs = &at;
  cfg.numAttrs = 1;
  return cfg;
}

// Clusters of two this device runs at once at one CTA an SM (a GPC with an odd number of free SMs
// leaves one out): a persistent grid of more would run its last clusters after the others.
int max_pair_clusters(Kernel k) {
  static const int n = [k] {
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = pair_config(device_attribute(DeviceAttr::SmCount), nullptr, at);
    int clusters = 0;
    CLEF_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, k, &cfg));
    return clusters;
  }();
  return n;
}
}  // namespace

void swiglu_gemm(const bf16* x, const bf16* w, bf16* out, int M, int K, int I, cudaStream_t s,
                 SwigluEpilogue epilogue, bool pairs) {
  if (M <= 0) return;
  if (!swiglu_gemm_supported(I, K))
    throw std::invalid_argument("swiglu_gemm: unsupported shape or device (I " + std::to_string(I) +
                                ", K " + std::to_string(K) + ")");
  Kernel kernel = pairs ? kernel_for<true>(epilogue) : kernel_for<false>(epilogue);
  CLEF_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  const CUtensorMap ma = tile_map(x, M, K, BM), mw = tile_map(w, 2 * I, K, pairs ? BN / 2 : BN);
  const int row_tiles = (M + BM - 1) / BM;
  if (!pairs) {
    const int tiles = row_tiles * (2 * I / BN);
    const int grid = std::min(tiles, device_attribute(DeviceAttr::SmCount));
    kernel<<<grid, kThreads, kSmem, s>>>(ma, mw, out, M, K, I);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  const int pair_tiles = (row_tiles + 1) / 2 * (2 * I / BN);
  const int clusters = std::min(pair_tiles, max_pair_clusters(kernel));
  if (clusters < 1) throw std::runtime_error("swiglu_gemm: no cluster of two CTAs fits an SM pair");
  cudaLaunchAttribute at;
  const cudaLaunchConfig_t cfg = pair_config(clusters, s, at);
  CLEF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, ma, mw, out, M, K, I));
}

}  // namespace clef::engine::cuda

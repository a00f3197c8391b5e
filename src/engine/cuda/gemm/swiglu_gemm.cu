// The SwiGLU-epilogue GEMM (see gemm/swiglu_gemm.h). Persistent kernel, one CTA an SM, 384
// threads: warpgroup 0 a TMA producer (one thread), two consumer warpgroups of 64 rows each running
// m64n256k16 wgmmas from 128B-swizzled K-major tiles (BK 64, 4 stages: 192 KiB); tile 128 rows x
// 256 regrouped weight rows (128 features). Tiles in bands of 16 row tiles with the weight block
// outer within a band, so a wave's A rows and weight blocks stay in L2.
// Epilogue (SwigluEpilogue): either the consumers form silu(g) u from their accumulators and store
// it (the tensor cores idle meanwhile: ~4 % of a tile), or they only round g and u to bf16 pairs
// into a 32 KiB buffer, one half of the tile's features at a time, and go on with the next tile
// while warps 1-3 of warpgroup 0 form and store the outputs. The second half waits in 32 registers
// until the next tile's `hold`-th k step (swiglu_hold_steps; the buffer holds one half: 4 stages + 64 KiB would
// not fit). Same operations on the same bf16 values: both give the same bits.
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
// The epilogue buffer: 128 rows x 64 features x a (g, u) bf16 pair; 256-byte rows whose 32-byte
// groups are XOR-swizzled by row % 4 (conflict-free 8-byte stores from the accumulator layout and
// 8-byte row reads).
constexpr int kEpiBytes = BM * (kSwigluGroup / 2) * 4, kEpiThreads = 96;
template <bool kWarps>
constexpr size_t smem_bytes() {
  return size_t(kStages) * (kABytes + kBBytes) + (kWarps ? kEpiBytes : 0) + 1024 +
         (2 * kStages + 2) * 8;
}

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
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

struct TileOrder {
  int tm, tn;  // row tiles (ceil(M / BM)), weight blocks (2I / BN)
  __device__ void at(int t, int& m, int& n) const {
    const int band = t / (kBand * tn), first = band * kBand;
    const int rows = min(kBand, tm - first), i = t - band * kBand * tn;
    n = i / rows;
    m = first + i % rows;
  }
};

// Byte offset in the epilogue buffer of feature pair-word f (0..63) of row r.
__device__ __forceinline__ uint32_t epi_offset(int r, int f) {
  return uint32_t(r) * 256 + uint32_t(f ^ ((r & 3) << 3)) * 4;
}
__device__ __forceinline__ uint32_t pack_gu(float g, float u) {
  const __nv_bfloat162 p = __floats2bfloat162_rn(g, u);  // .x = g (low half), .y = u
  return *reinterpret_cast<const uint32_t*>(&p);
}
__device__ __forceinline__ float swiglu_rounded(float g, float u) {
  return __bfloat162float(__float2bfloat16(silu_rounded_to<bf16>(g))) * u;
}

template <bool kWarps>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_swiglu_kernel(const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_w, bf16* __restrict__ out, int M,
                       int K, int I, int hold) {
#ifdef CLEF_WGMMA_AVAILABLE
  using namespace hopper;  // fences, waits and mbarriers (hopper_async.cuh)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* base =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t a0 = smem_addr(base), w0 = a0 + kStages * kABytes;
  uint8_t* epi = base + kStages * (kABytes + kBBytes);
  const uint32_t full = w0 + kStages * kBBytes + (kWarps ? kEpiBytes : 0),
                 empty = full + kStages * 8;
  const uint32_t epi_full = empty + kStages * 8, epi_empty = epi_full + 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, 2);  // one arrive a consumer warpgroup
    }
    mbar_init(epi_full, 8);  // one arrive a consumer warp, after its lanes' stores
    mbar_init(epi_empty, kEpiThreads / 32);
    mbar_init_fence();
  }
  __syncthreads();
  const TileOrder order{(M + BM - 1) / BM, 2 * I / BN};
  const int tiles = order.tm * order.tn, kt_n = K / BK;
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    setmaxnreg_dec<kWarps ? 56 : 40>();
    if constexpr (kWarps) {
      if (threadIdx.x >= 32) {  // warps 1-3: the epilogue, half a tile's features at a time
        const int ew = threadIdx.x / 32 - 1, lane = threadIdx.x % 32;
        uint32_t hand = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
          int tm, tn;
          order.at(t, tm, tn);
#pragma unroll 1
          for (int half = 0; half < 2; ++half, ++hand) {
            mbar_wait(epi_full, hand & 1);
            bf16* o = out + tn * (BN / 2) + half * (BN / 4) + 2 * lane;
#pragma unroll 4
            for (int r = ew; r < BM; r += 3) {
              const uint2 v = *reinterpret_cast<const uint2*>(epi + epi_offset(r, 2 * lane));
              const int row = tm * BM + r;
              if (row >= M) continue;
              const __nv_bfloat162 p0 = *reinterpret_cast<const __nv_bfloat162*>(&v.x);
              const __nv_bfloat162 p1 = *reinterpret_cast<const __nv_bfloat162*>(&v.y);
              *reinterpret_cast<__nv_bfloat162*>(o + static_cast<size_t>(row) * I) =
                  __floats2bfloat162_rn(
                      swiglu_rounded(__bfloat162float(p0.x), __bfloat162float(p0.y)),
                      swiglu_rounded(__bfloat162float(p1.x), __bfloat162float(p1.y)));
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(epi_empty);
          }
        }
        return;
      }
    }
    if (threadIdx.x != 0) return;
    int s = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int tm, tn;
      order.at(t, tm, tn);
      for (int kt = 0; kt < kt_n; ++kt) {
        mbar_wait(empty + 8 * s, phase ^ 1);
        mbar_expect_tx(full + 8 * s, kABytes + kBBytes);
        tma_load_2d(a0 + s * kABytes, &map_a, kt * BK, tm * BM, full + 8 * s);
        tma_load_2d(w0 + s * kBBytes, &map_w, kt * BK, tn * BN, full + 8 * s);
        if (++s == kStages) s = 0, phase ^= 1;
      }
    }
    return;
  }
  setmaxnreg_inc<kWarps ? 224 : 232>();  // 128 (producer + epilogue) x 56 + 256 x 224 <= 64 K
  const int c = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  float d[128];
  int s = 0;
  uint32_t phase = 0;
  // kWarps: the handoffs so far (each one buffer phase), and the held second half: the (g, u)
  // pairs of n8 tile 8 + j, row half rh, column e at held[4 j + 2 rh + e].
  uint32_t hand = 0, held[32];
  bool holding = false;
  // This thread's row in the buffer (+ 8 for the second row half) and its pair-word in an n8 tile.
  const int er = c * 64 + 16 * warp + lane / 4, ef = 2 * (lane % 4);
  auto hand_over = [&](auto&& store) {
    mbar_wait(epi_empty, (hand & 1) ^ 1);
    store();
    __syncwarp();  // the lanes' stores before lane 0's (releasing) arrive
    if (lane == 0) mbar_arrive(epi_full);
    ++hand;
  };
  auto flush_held = [&] {
    hand_over([&] {
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int rh = 0; rh < 2; ++rh)
          *reinterpret_cast<uint2*>(epi + epi_offset(er + 8 * rh, 8 * j + ef)) =
              make_uint2(held[4 * j + 2 * rh], held[4 * j + 2 * rh + 1]);
    });
    holding = false;
  };
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int tm, tn;
    order.at(t, tm, tn);
    int prev = -1;
    for (int kt = 0; kt < kt_n; ++kt) {
      mbar_wait(full + 8 * s, phase);
      wgmma_fence();
      const uint32_t a = a0 + s * kABytes + c * 64 * 128, w = w0 + s * kBBytes;
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk)
        wgmma::ss_m64n256k16(d, desc_sw128(a + 32 * kk), desc_sw128(w + 32 * kk), kt > 0 || kk > 0);
      wgmma_commit();
      wgmma_wait<1>();  // the previous stage's products are done: release it
      if (prev >= 0 && threadIdx.x % 128 == 0) mbar_arrive(empty + 8 * prev);
      prev = s;
      if (++s == kStages) s = 0, phase ^= 1;
      if constexpr (kWarps) {
        // The previous tile's second half, while this tile's products run (the epilogue warps
        // have had `hold` steps for the first half).
        if (holding && kt == hold) flush_held();
      }
    }
    wgmma_wait<0>();
    fence_regs(d);
    if (prev >= 0 && threadIdx.x % 128 == 0) mbar_arrive(empty + 8 * prev);
    // Fragment (j, e) of n8 tile j is row 16 warp + lane / 4 (+ 8 for e >= 2), column
    // 8 j + 2 (lane % 4) + e % 2; gate columns are tiles 0..15, up the same features in 16..31.
    if constexpr (kWarps) {
      if (holding) flush_held();  // a K of at most `hold` steps
      hand_over([&] {  // features 0..63 (n8 tiles 0..7) to the epilogue warps now
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int rh = 0; rh < 2; ++rh)
            *reinterpret_cast<uint2*>(epi + epi_offset(er + 8 * rh, 8 * j + ef)) =
                make_uint2(pack_gu(d[4 * j + 2 * rh], d[4 * (j + 16) + 2 * rh]),
                           pack_gu(d[4 * j + 2 * rh + 1], d[4 * (j + 16) + 2 * rh + 1]));
      });
#pragma unroll
      for (int j = 0; j < 8; ++j)  // features 64..127 wait in registers
#pragma unroll
        for (int i = 0; i < 4; ++i)
          held[4 * j + i] = pack_gu(d[4 * (j + 8) + i], d[4 * (j + 24) + i]);
      holding = true;
      continue;
    }
    const int f0 = tn * (BN / 2);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = tm * BM + c * 64 + 16 * warp + lane / 4 + 8 * half;
      if (row >= M) continue;
      bf16* o = out + static_cast<size_t>(row) * I + f0 + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        float r[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float g = __bfloat162float(__float2bfloat16(d[4 * j + 2 * half + e]));
          const float u = __bfloat162float(__float2bfloat16(d[4 * (j + 16) + 2 * half + e]));
          r[e] = swiglu_rounded(g, u);
        }
        *reinterpret_cast<__nv_bfloat162*>(o + 8 * j) = __floats2bfloat162_rn(r[0], r[1]);
      }
    }
  }
  if constexpr (kWarps) {
    if (holding) flush_held();
  }
#else
  (void)map_a, (void)map_w, (void)out, (void)M, (void)K, (void)I, (void)hold;
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
         smem_bytes<true>() <= size_t(device_attribute(DeviceAttr::SmemOptin)) &&
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

// The k step of a tile at which the consumers hand over the previous tile's second half
// (CLEF_SWIGLU_HOLD, default 16: ~9 us of products on an H100, several times what the epilogue
// warps take for the first half, so the consumers do not wait for them).
int swiglu_hold_steps() {
  static const int steps = [] {
    const char* v = std::getenv("CLEF_SWIGLU_HOLD");
    return v && *v ? std::max(1, std::atoi(v)) : 16;
  }();
  return steps;
}

bool swiglu_epilogue_warps(SwigluEpilogue e) {
  if (e != SwigluEpilogue::Default) return e == SwigluEpilogue::Warps;
  static const bool warps = [] {
    const char* v = std::getenv("CLEF_SWIGLU_EPILOGUE");
    if (v && std::strcmp(v, "warps") == 0) return true;
    if (v && std::strcmp(v, "consumers") == 0) return false;
    return kSwigluEpilogueWarpsDefault;
  }();
  return warps;
}

void swiglu_gemm(const bf16* x, const bf16* w, bf16* out, int M, int K, int I, cudaStream_t s,
                 SwigluEpilogue epilogue) {
  if (M <= 0) return;
  if (!swiglu_gemm_supported(I, K))
    throw std::invalid_argument("swiglu_gemm: unsupported shape or device (I " + std::to_string(I) +
                                ", K " + std::to_string(K) + ")");
  const bool warps = swiglu_epilogue_warps(epilogue);
  auto* kernel = warps ? gemm_swiglu_kernel<true> : gemm_swiglu_kernel<false>;
  const size_t smem = warps ? smem_bytes<true>() : smem_bytes<false>();
  CLEF_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const CUtensorMap ma = tile_map(x, M, K, BM), mw = tile_map(w, 2 * I, K, BN);
  const int tiles = (M + BM - 1) / BM * (2 * I / BN);
  const int grid = std::min(tiles, device_attribute(DeviceAttr::SmCount));
  kernel<<<grid, kThreads, smem, s>>>(ma, mw, out, M, K, I, swiglu_hold_steps());
  CLEF_CUDA_LAUNCH_CHECK();
}

}  // namespace clef::engine::cuda

// The SwiGLU-epilogue GEMM (see gemm/swiglu_gemm.h). Persistent kernel, one CTA an SM, 384
// threads: warpgroup 0 a TMA producer (one thread), two consumer warpgroups of 64 rows each running
// m64n256k16 wgmmas from 128B-swizzled K-major tiles (BK 64, 4 stages: 192 KiB); tile 128 rows x
// 256 regrouped weight rows (128 features). Tiles in bands of 16 row tiles with the weight block
// outer within a band, so a wave's A rows and weight blocks stay in L2.
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
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, 2);  // one arrive a consumer warpgroup
    }
    mbar_init_fence();
  }
  __syncthreads();
  const TileOrder order{(M + BM - 1) / BM, 2 * I / BN};
  const int tiles = order.tm * order.tn, kt_n = K / BK;
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    setmaxnreg_dec<40>();
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
  setmaxnreg_inc<232>();
  const int c = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  float d[128];
  int s = 0;
  uint32_t phase = 0;
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
    }
    wgmma_wait<0>();
    fence_regs(d);
    if (prev >= 0 && threadIdx.x % 128 == 0) mbar_arrive(empty + 8 * prev);
    // Epilogue: fragment (j, e) of n8 tile j is row 16 warp + lane / 4 (+ 8 for e >= 2), column
    // 8 j + 2 (lane % 4) + e % 2; gate columns are tiles 0..15, up the same features in 16..31.
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
          // swiglu's rounding points (kernels/elementwise.cu) on the bf16-rounded gate_up
          const float g = rnd<bf16>(d[4 * j + 2 * half + e]);
          const float u = rnd<bf16>(d[4 * (j + 16) + 2 * half + e]);
          r[e] = rnd<bf16>(silu_rounded_to<bf16>(g)) * u;
        }
        *reinterpret_cast<__nv_bfloat162*>(o + 8 * j) = __floats2bfloat162_rn(r[0], r[1]);
      }
    }
  }
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

void swiglu_gemm(const bf16* x, const bf16* w, bf16* out, int M, int K, int I, cudaStream_t s) {
  if (M <= 0) return;
  if (!swiglu_gemm_supported(I, K))
    throw std::invalid_argument("swiglu_gemm: unsupported shape or device (I " + std::to_string(I) +
                                ", K " + std::to_string(K) + ")");
  CLEF_CUDA_CHECK(cudaFuncSetAttribute(gemm_swiglu_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  const CUtensorMap ma = tile_map(x, M, K, BM), mw = tile_map(w, 2 * I, K, BN);
  const int tiles = (M + BM - 1) / BM * (2 * I / BN);
  const int grid = std::min(tiles, device_attribute(DeviceAttr::SmCount));
  gemm_swiglu_kernel<<<grid, kThreads, kSmem, s>>>(ma, mw, out, M, K, I);
  CLEF_CUDA_LAUNCH_CHECK();
}

}  // namespace clef::engine::cuda

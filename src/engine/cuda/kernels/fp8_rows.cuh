// Device side of the FP8 activation quantiser (quantize.h), shared by quantize_rows_e4m3 and the
// producers that quantise their own output (norm.cu, elementwise.cu, attn_prep.cu): one
// definition of the scale and the rounding, so a fused producer's codes are exactly
// quantize_rows_e4m3's on the same bf16 values. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/cuda/kernels/quantize.h"

namespace clef::engine::cuda {
namespace {

constexpr int kFp8Block = 128;
constexpr float kFp8E4m3Max = 448.0f;

__device__ __forceinline__ float e4m3_block_scale(float amax) {
  return amax > 0.0f ? __fdiv_rn(amax, kFp8E4m3Max) : 1.0f;
}

__device__ __forceinline__ uint8_t e4m3_code(float x, float scale) {
  // __fdiv_rn: IEEE division whatever the compiler flags, as the host reference divides.
  return static_cast<uint8_t>(
      __nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3));
}

// One warp quantises the n <= 128 values xr[0..n) (bf16, any memory) of one (row, block): lane l
// takes channels l, l + 32, l + 64, l + 96. Writes the codes to qr[0..n) and returns the scale
// (every lane).
__device__ __forceinline__ float quantize_block_warp(const __nv_bfloat16* xr, int n, uint8_t* qr) {
  const int lane = threadIdx.x & 31;
  float v[4];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = lane + 32 * j;
    v[j] = c < n ? __bfloat162float(xr[c]) : 0.0f;
    amax = fmaxf(amax, fabsf(v[j]));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = e4m3_block_scale(amax);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = lane + 32 * j;
    if (c < n) qr[c] = e4m3_code(v[j], s);
  }
  return s;
}

// The whole block quantises one row of `cols` bf16 values staged in shared memory (the caller
// has synchronised after writing them) into f's row `row`: warp w takes blocks w, w + warps, ...
__device__ __forceinline__ void quantize_staged_row(const __nv_bfloat16* srow, int cols, int row,
                                                    const Fp8Rows& f) {
  const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int nb = (cols + kFp8Block - 1) / kFp8Block;
  for (int b = warp; b < nb; b += warps) {
    const float s = quantize_block_warp(srow + b * kFp8Block, min(kFp8Block, cols - b * kFp8Block),
                                        f.q + static_cast<int64_t>(row) * f.ld + b * kFp8Block);
    if ((threadIdx.x & 31) == 0) f.scales[static_cast<int64_t>(b) * f.M + row] = s;
  }
}

constexpr int kFp8MaxRow = kFp8MaxStagedRow;

// The fused FP8 producers stage their bf16 output row here (dynamic shared memory) before
// quantising it.
__device__ __forceinline__ __nv_bfloat16* fp8_stage() {
  extern __shared__ __align__(16) unsigned char fp8_stage_raw[];
  return reinterpret_cast<__nv_bfloat16*>(fp8_stage_raw);
}

// grid rows, any block: row t's values val(t, i), i < cols (bf16, as the plain kernel computes
// and stores them), staged, optionally stored to out[t * ldo + i], then quantised into f.
// Element-wise producers only (each value independent of the others).
template <typename Val>
__global__ void fp8_elementwise_rows_kernel(int cols, Val val, __nv_bfloat16* out, int ldo,
                                            Fp8Rows f) {
  const int t = blockIdx.x;
  __nv_bfloat16* stage = fp8_stage();
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const __nv_bfloat16 v = val(t, i);
    stage[i] = v;
    if (out) out[static_cast<int64_t>(t) * ldo + i] = v;
  }
  __syncthreads();
  quantize_staged_row(stage, cols, t, f);
}

// Host: the checks every FP8 producer makes before launching.
inline void check_fp8_rows(const char* op, int cols, const Fp8Rows& f, int rows) {
  if (cols > kFp8MaxRow)
    throw std::invalid_argument(std::string(op) + ": FP8 output rows above " +
                                std::to_string(kFp8MaxRow) + " values are not staged");
  if (!f.q || !f.scales || f.ld < cols || f.M < rows)
    throw std::invalid_argument(std::string(op) + ": bad FP8 output (codes, scales, ld, M)");
}

}  // namespace
}  // namespace clef::engine::cuda

// FP8 quantisers: one warp per (row, 128 channels) for activations (reads 256 bytes, writes 128 +
// one scale: bandwidth bound), one block per 128x128 tile for weights (load time only).
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/fp8_rows.cuh"
#include "engine/cuda/kernels/quantize.h"

namespace clef::engine::cuda {
namespace {

constexpr int kBlock = kFp8Block;

// grid (ceil(cols / 128), ceil(rows / 4)), block 128 = 4 warps, one (row, block) per warp; lane l
// handles channels l, l + 32, l + 64, l + 96 of the block (coalesced for any cols and ldx).
__global__ void quantize_rows_kernel(const __nv_bfloat16* __restrict__ x, int rows, int cols,
                                     int ldx, uint8_t* __restrict__ q, int ldq,
                                     float* __restrict__ scales, int64_t row_stride,
                                     int64_t block_stride) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.y * 4 + (threadIdx.x >> 5);
  const int b = blockIdx.x;
  if (row >= rows) return;
  const __nv_bfloat16* xr = x + static_cast<int64_t>(row) * ldx + b * kBlock;
  const float s = quantize_block_warp(xr, min(kBlock, cols - b * kBlock),
                                      q + static_cast<int64_t>(row) * ldq + b * kBlock);
  if (lane == 0) scales[row * row_stride + b * block_stride] = s;
}

// grid (ceil(k / 128), ceil(n / 128)), block 256: amax over the tile, then the codes.
__global__ void quantize_blocks_kernel(const __nv_bfloat16* __restrict__ w, int n, int k,
                                       uint8_t* __restrict__ q, float* __restrict__ scales,
                                       int64_t row_stride, int64_t block_stride) {
  __shared__ float warp_max[8];
  const int r0 = blockIdx.y * kBlock, c0 = blockIdx.x * kBlock;
  const int rn = min(kBlock, n - r0), cn = min(kBlock, k - c0);
  float amax = 0.0f;
  for (int i = threadIdx.x; i < rn * kBlock; i += blockDim.x) {
    const int r = i / kBlock, c = i % kBlock;
    if (c < cn) amax = fmaxf(amax, fabsf(__bfloat162float(w[int64_t(r0 + r) * k + c0 + c])));
  }
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = 0.0f;
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, warp_max[i]);
  const float s = e4m3_block_scale(amax);
  for (int i = threadIdx.x; i < rn * kBlock; i += blockDim.x) {
    const int r = i / kBlock, c = i % kBlock;
    if (c < cn) {
      const int64_t e = int64_t(r0 + r) * k + c0 + c;
      q[e] = e4m3_code(__bfloat162float(w[e]), s);
    }
  }
  if (threadIdx.x == 0) scales[blockIdx.y * row_stride + blockIdx.x * block_stride] = s;
}

// Grid-stride over the elements of w [n, k].
__global__ void dequantize_blocks_kernel(const uint8_t* __restrict__ q, int n, int k,
                                         const float* __restrict__ scales, int64_t row_stride,
                                         int64_t block_stride, __nv_bfloat16* __restrict__ out) {
  const int64_t total = int64_t(n) * k;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / k, c = e % k;
    const __half_raw h = __nv_cvt_fp8_to_halfraw(q[e], __NV_E4M3);  // exact
    const float v =
        __half2float(__half(h)) * scales[(r / kBlock) * row_stride + (c / kBlock) * block_stride];
    out[e] = __float2bfloat16_rn(v);
  }
}

}  // namespace

void dequantize_blocks_e4m3(const uint8_t* q, int n, int k, const float* scales, int64_t row_stride,
                            int64_t block_stride, __nv_bfloat16* out, cudaStream_t s) {
  if (n <= 0 || k <= 0) return;
  const int64_t total = int64_t(n) * k;
  const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 8192));
  dequantize_blocks_kernel<<<blocks, 256, 0, s>>>(q, n, k, scales, row_stride, block_stride, out);
  CLEF_CUDA_CHECK(cudaGetLastError());
}

void quantize_rows_e4m3(const __nv_bfloat16* x, int rows, int cols, int ldx, uint8_t* q, int ldq,
                        float* scales, int64_t row_stride, int64_t block_stride, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  if (ldx < cols || ldq < cols)
    throw std::runtime_error("quantize_rows_e4m3: row strides " + std::to_string(ldx) + "/" +
                             std::to_string(ldq) + " below cols " + std::to_string(cols));
  const dim3 grid((cols + kBlock - 1) / kBlock, (rows + 3) / 4);
  quantize_rows_kernel<<<grid, 128, 0, s>>>(x, rows, cols, ldx, q, ldq, scales, row_stride,
                                            block_stride);
  CLEF_CUDA_CHECK(cudaGetLastError());
}

void quantize_blocks_e4m3(const __nv_bfloat16* w, int n, int k, uint8_t* q, float* scales,
                          int64_t row_stride, int64_t block_stride, cudaStream_t s) {
  if (n <= 0 || k <= 0) return;
  const dim3 grid((k + kBlock - 1) / kBlock, (n + kBlock - 1) / kBlock);
  quantize_blocks_kernel<<<grid, 256, 0, s>>>(w, n, k, q, scales, row_stride, block_stride);
  CLEF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace clef::engine::cuda

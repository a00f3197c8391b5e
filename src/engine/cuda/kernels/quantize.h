// FP8 quantisers (docs/engine.md "FP8"): bf16 -> e4m3 with float32 scales, HF fine-grained
// semantics: scale = amax / 448 over the block (1 for an all-zero block), code = e4m3(x / scale)
// rounded to nearest even and saturated to ±448; dequantised = e4m3 * scale. Bit-identical to the
// host conversions in model/fp8.h (the GPU tests compare codes and scales exactly).
//
// Scale layouts are given as strides so that one kernel serves cuBLASLt's layouts and the HF
// checkpoint's; gemm.h names the ones the FP8 GEMM reads.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace clef::engine::cuda {

// A producer's FP8 output, in the layout the FP8 GEMM reads as its activations (gemm.h, Vec128):
// codes [rows, cols] with row stride ld, scale(row, kb) = scales[kb * M + row], M the padded row
// count the GEMM sees (a multiple of 4). The fused producers (norm.h, elementwise.h,
// attn_prep.h) write it from the bf16-rounded value they would store, so their codes and scales
// equal quantize_rows_e4m3's on their plain output, exactly.
// Widest row a fused producer quantises (it stages the row in shared memory: 46 KiB of bf16,
// leaving the kernels' static shared memory room within the 48 KiB a launch gets by default).
constexpr int kFp8MaxStagedRow = 23552;

struct Fp8Rows {
  uint8_t* q = nullptr;
  int ld = 0;
  float* scales = nullptr;
  int M = 0;
};

// Activations, per token per 128 channels (cuBLASLt VEC128_32F): x [rows, cols] (row stride ldx)
// -> q [rows, cols] (row stride ldq) and scale(row, b) = scales[row * row_stride + b *
// block_stride] for b < ceil(cols / 128). The FP8 GEMM reads row_stride 1, block_stride rows.
void quantize_rows_e4m3(const __nv_bfloat16* x, int rows, int cols, int ldx, uint8_t* q, int ldq,
                        float* scales, int64_t row_stride, int64_t block_stride, cudaStream_t s);

// Weights, per 128x128 block (cuBLASLt BLK128x128_32F; used at load for a bf16 release): w [n, k]
// row-major -> q [n, k] and scale(bn, bk) = scales[bn * row_stride + bk * block_stride].
void quantize_blocks_e4m3(const __nv_bfloat16* w, int n, int k, uint8_t* q, float* scales,
                          int64_t row_stride, int64_t block_stride, cudaStream_t s);

// The inverse for weights: out[r, c] = bf16(e4m3(q[r, c]) * scale(r / 128, c / 128)), scale as
// quantize_blocks_e4m3 lays it out (a bf16 copy of an FP8 weight, for a GEMM kept in bf16).
void dequantize_blocks_e4m3(const uint8_t* q, int n, int k, const float* scales, int64_t row_stride,
                            int64_t block_stride, __nv_bfloat16* out, cudaStream_t s);

}  // namespace clef::engine::cuda

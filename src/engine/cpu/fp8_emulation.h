// Host emulation of the CUDA engine's FP8 GEMM inputs (docs/engine.md "FP8"), for tests: the same
// values the device GEMM multiplies, in float32. An oracle for how much FP8 itself moves the
// answers, apart from the device wiring.
//   activations: each row rounded to bf16 (the producers' output), then per 128 channels one scale
//                amax / 448 and e4m3 codes (quantize_rows_e4m3);
//   weights:     per 128x128 block of the stored [N, K] tensor one scale amax / 448 and e4m3 codes
//                (quantize_blocks_e4m3, model/fp8.h).
// Each is replaced by its dequantised value (code * scale). One difference: the device quantises a
// bf16 release's fused projections ([q|k|v], [qkv|z], [gate|up]) as one tensor, so where a part
// does not fill whole 128-row blocks (the tiny fixtures' k|v) a block there spans two parts.
#pragma once

namespace clef::engine::cpu {

// Which values the projections of the backbone multiply.
enum class GemmInputs {
  Float32,      // the stored weights and float32 activations (the reference)
  Fp8Emulated,  // both as the FP8 CUDA engine quantises them (`--dtype fp8-emulated`, the oracle;
                // slow: a bf16 release's weights are requantised on every call; an FP8 release's
                // weights are its dequantised codes, as the device multiplies them)
};

// x: [rows, cols] with row stride ld, in place.
void fp8_emulate_rows(float* x, int rows, int cols, int ld);

// w: [n, k] contiguous, in place (blocks counted from row 0 and column 0).
void fp8_emulate_weight_blocks(float* w, int n, int k);

}  // namespace clef::engine::cpu

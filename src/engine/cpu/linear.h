// y = x @ W^T (+ b) with W a stored (usually bf16) tensor [out, in]: the weight is converted to
// float32 one block of rows at a time into a scratch buffer right before its cblas_sgemm, so the
// model stays in its stored dtype in memory (a 9B release must fit in 24 GiB).
#pragma once

#include <vector>

#include "engine/cpu/fp8_emulation.h"
#include "model/release.h"

namespace clef::engine::cpu {

// x: [rows, in] with row stride ldx; y: [rows, n_out] with row stride ldy. Uses weight rows
// [row0, row0 + n_out) of w (w.shape = [out, in...], in = product of the trailing dims). bias
// (float32, n_out values) may be null. Throws std::runtime_error when the row range is outside w.
// inputs = Fp8Emulated multiplies x and w as the FP8 CUDA engine quantises them (fp8_emulation.h;
// the weight blocks are those of the whole tensor w).
void linear(const model::Tensor& w, const float* x, int rows, int ldx, float* y, int ldy,
            const float* bias = nullptr, int row0 = 0, int n_out = -1,
            GemmInputs inputs = GemmInputs::Float32);

// Convenience: contiguous x [rows, in] -> new y [rows, out].
std::vector<float> linear(const model::Tensor& w, const float* x, int rows,
                          const float* bias = nullptr, GemmInputs inputs = GemmInputs::Float32);

// A small tensor converted whole (norm weights, biases, conv kernels, scalars).
std::vector<float> to_f32(const model::Tensor& t);

}  // namespace clef::engine::cpu

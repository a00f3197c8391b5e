// The vision MLP's fc1 with its GELU, timed for workbench_vision: host code (C++20, for the GEMM
// module's headers), kept out of the .cu that is compiled as C++17.
#pragma once

#include <cuda_bf16.h>

#include "common.h"

namespace clef::dev {

// x [rows, k] in, mid [rows, n] out (bf16): the bias GEMM alone, the bias GEMM then gelu_inplace
// (vec8), and the GELU in the GEMM's epilogue; FLOPs of the GEMM.
void time_fc1_gelu(Timer& timer, const __nv_bfloat16* x, __nv_bfloat16* mid, int rows, int k,
                   int n);

}  // namespace clef::dev

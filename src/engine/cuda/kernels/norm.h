// Row-wise norms of the backbone (docs/spec/model.md §3). Templated on the storage type E
// (__nv_bfloat16 = production, float = parity mode); arithmetic is fp32 and, for bf16, results are
// rounded exactly where the reference's bf16 run rounds. Each op has a generic and a vec8 variant
// (kernels/common.cuh); `path` (kernel_path.h) picks, and <op>_variant names the one that runs for
// given shapes, assuming 16-byte aligned pointers (every engine buffer is; an unaligned pointer
// makes the dispatcher take the generic variant).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/quantize.h"

namespace clef::engine::cuda {

// out = RMSNorm1p(x; w) per row: x * rsqrt(mean(x^2) + eps) * (1 + w), fp32 then rounded to E.
template <typename E>
void rms_norm_1p(const E* x, int ldx, const float* w, E* out, int ldo, int rows, int D, float eps,
                 KernelPath path, cudaStream_t s);
// "rms_norm_1p_vec8" or "rms_norm_1p_generic".
const char* rms_norm_1p_variant(int ldx, int ldo, int D, KernelPath path);

// y[t, h, :] = (RMSNorm(o[t, h, :]) * w) * silu(z[t, h, :]) per value head, plain w (no 1+),
// rounded like the reference (norm -> E, * w -> E, * silu(z) in fp32 -> E). o: [T, H*dv]
// contiguous, z row stride ldz.
template <typename E>
void gated_rms_norm(const E* o, const E* z, int ldz, const float* w, E* y, int T, int H, int dv,
                    float eps, KernelPath path, cudaStream_t s);
// "gated_rms_norm_vec8" or "gated_rms_norm_generic".
const char* gated_rms_norm_variant(int ldz, int dv, KernelPath path);

// FP8 producers (bf16 only): the same op, its bf16 output staged and quantised per row per 128
// channels into f (quantize.h) inside the kernel, and also stored to out / y unless that is null.
// f equals quantize_rows_e4m3 of the plain op's output exactly (the same variant computes the
// values; for the gated norm, the vec8 form needs H * lpg <= 1024 threads, else the generic
// form's values are quantised). Rows (D, H * dv) up to 23552 values.
void rms_norm_1p_fp8(const __nv_bfloat16* x, int ldx, const float* w, __nv_bfloat16* out, int ldo,
                     int rows, int D, float eps, const Fp8Rows& f, KernelPath path, cudaStream_t s);
void gated_rms_norm_fp8(const __nv_bfloat16* o, const __nv_bfloat16* z, int ldz, const float* w,
                        __nv_bfloat16* y, int T, int H, int dv, float eps, const Fp8Rows& f,
                        KernelPath path, cudaStream_t s);

}  // namespace clef::engine::cuda

// Element-wise kernels of the backbone: embedding gather, SwiGLU and the float copy of hidden
// states. Storage type E as in norm.h; generic and vec8 variants picked by `path`
// (kernel_path.h), <op>_variant names the one that runs for given shapes (16-byte aligned pointers
// assumed).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/quantize.h"

namespace clef::engine::cuda {

// out[t, :] = table[ids[t], :]  (D columns).
template <typename E>
void embed_gather(const E* table, const int32_t* ids, E* out, int T, int D, KernelPath path,
                  cudaStream_t s);
// "embed_gather_vec8" or "embed_gather_generic" (bf16: E = __nv_bfloat16, else float).
const char* embed_gather_variant(int D, bool bf16, KernelPath path);

// out[t, i] = silu(gu[t, i]) * gu[t, I + i]   (gu = fused gate|up output [T, 2I]). group > 0: gu's
// columns come in blocks of `group` gates followed by the same features' ups (a multiple of 8
// dividing I; gemm/swiglu_gemm.h's regrouped weight), so feature i's gate is at column
// (i / group) 2 group + i % group and its up `group` columns further.
template <typename E>
void swiglu(const E* gu, E* out, int T, int I, KernelPath path, cudaStream_t s, int group = 0);
// "swiglu_vec8" or "swiglu_generic".
const char* swiglu_variant(int I, KernelPath path);

// SwiGLU as the FP8 producer of the down projection (bf16 only): out (unless null) as swiglu
// writes it, and f (quantize.h) = quantize_rows_e4m3 of that output, exactly, quantised inside
// the kernel. I up to 23552.
void swiglu_fp8(const __nv_bfloat16* gu, __nv_bfloat16* out, int T, int I, const Fp8Rows& f,
                cudaStream_t s);

// Float copy of E rows (for dumping hidden states): out[t*D + i] = float(in[t*D + i]).
template <typename E>
void to_float(const E* in, float* out, size_t n, KernelPath path, cudaStream_t s);
// "to_float_vec8" or "to_float_generic".
const char* to_float_variant(KernelPath path);

}  // namespace clef::engine::cuda

// The MLP's gate_up GEMM with SwiGLU in its epilogue (bf16, sm_90a): out [M, I] = swiglu(x W^T)
// without gate_up's [M, 2I] output ever reaching memory (344 MB written and read back at 7k rows
// with cuBLASLt + swiglu). W is stored regrouped (regroup_gate_up): blocks of kSwigluGroup gate
// rows followed by the same features' up rows, so a 256-row weight tile holds both halves of 128
// features and each thread's accumulators pair gate and up. The epilogue forms
// bf16(bf16(silu(bf16 g)) * bf16 u) as swiglu does on a rounded gate_up; no split K, and a row's
// products do not depend on the other rows, so its bits do not depend on M (batch invariance), and
// on the H100 they equal cuBLASLt's gate_up + swiglu bit for bit (perf-log v29f).
// Measured (v29f, H100): 0.935 / 0.961 of cuBLASLt + swiglu at 1024 / 7040 rows, 1.185 at 384;
// in the engine (v29g) a 7 x 1000 forward 169.7 -> 165.4 ms, served C16 +2.4 %.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace clef::engine::cuda {

constexpr int kSwigluGroup = 128;  // gate rows, then up rows, per block of the regrouped weight

// Whether the backbone uses it where it can (its weights then get regrouped at upload):
// CLEF_SWIGLU_GEMM=1 / 0, else kSwigluGemmDefault.
constexpr bool kSwigluGemmDefault = true;
bool swiglu_gemm_enabled();
// Whether the fused kernel runs I features over K inputs on the current device: sm_90 (the kernel
// is built for sm_90a only), I % 128 == 0, K % 64 == 0.
bool swiglu_gemm_supported(int I, int K);
// The fewest rows the backbone runs it at (cuBLASLt + swiglu below: faster at few row tiles);
// CLEF_SWIGLU_GEMM_MIN_ROWS overrides the default 1024.
int swiglu_gemm_min_rows();

// w [2I, K] ([gate | up], device) rewritten in place as blocks of kSwigluGroup gate rows, then
// their up rows; scratch: 2 I K bf16 of device memory. Synchronous.
void regroup_gate_up(__nv_bfloat16* w, __nv_bfloat16* scratch, int I, int K);

// out [M, I] (row stride I) = swiglu(x [M, K] (row stride K) W^T) with W regrouped. x, w, out
// 16-byte aligned. Requires swiglu_gemm_supported(I, K).
void swiglu_gemm(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out, int M, int K,
                 int I, cudaStream_t s);

}  // namespace clef::engine::cuda

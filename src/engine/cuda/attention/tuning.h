// Internal knobs of attention_core_bf16 for tests and tuning: the kernel shape (4 or 8 warps of 16
// query rows per CTA) and the heuristic that attention_core_bf16 uses to pick it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "engine/cuda/attention/attention_core.h"

namespace clef::engine::cuda {

void attention_core_bf16_warps(int warps, const __nv_bfloat16* q, const __nv_bfloat16* k,
                               const __nv_bfloat16* v, __nv_bfloat16* out, int T, int n_heads,
                               int n_kv_heads, int head_dim, cudaStream_t stream,
                               const AttnSequences* seqs = nullptr);

// The warps attention_core_bf16 uses for this shape on the current device.
int attention_core_bf16_pick_warps(int T, int n_heads, int head_dim);

}  // namespace clef::engine::cuda

// The Hopper attention kernel (flash_wgmma.cu): attention_core.h's contract on warpgroup MMAs,
// sm_90 only. Internal to attention/ and its tests; tuning.h exposes it as the "wg64" / "wg128"
// variants (key tiles of 64 / 128 rows; 128 query rows per tile).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "engine/cuda/attention/attention_core.h"

namespace clef::engine::cuda {

// Descriptor convention of the kernel's shared-memory operands, as two bits. Bit 0 clear: the
// K-major operands (Q, K) take the leading byte offset along K and the stride byte offset across
// 8-row groups (M / N), the PTX ISA's convention. Bit 1 set: the MN-major operand (V) takes the
// leading byte offset along its contiguous dimension N and the stride byte offset along K (bit 1
// clear: the other way round). The H200 faulted with 0 (session 11), reading past the V tiles as
// convention 0 would; attention_wgmma_test probes all four.
constexpr int kWgmmaLayout = 2;

// Head dims and key tiles there is a kernel for (64, 80, 128, 256 with 64-key tiles; 64, 80, 128
// with 128), and whether this device runs it (sm_90, shared memory).
bool wgmma_attention_built(int head_dim, int key_tile);
bool wgmma_attention_supported(int head_dim, int key_tile);
int wgmma_attention_rows_per_tile();  // 128

// Throws std::invalid_argument where !wgmma_attention_supported, or on bad shapes.
void attention_core_bf16_wgmma(int key_tile, const __nv_bfloat16* q, const __nv_bfloat16* k,
                               const __nv_bfloat16* v, __nv_bfloat16* out, int T, int n_heads,
                               int n_kv_heads, int head_dim, cudaStream_t stream,
                               const AttnSequences* seqs = nullptr);

// The kernel with another descriptor convention (the probe test): probe true gives the CTA 32 KiB
// of shared-memory slack past its tiles, so that a wrong convention reads garbage but cannot fault.
void attention_wgmma_probe(int key_tile, int layout, const __nv_bfloat16* q, const __nv_bfloat16* k,
                           const __nv_bfloat16* v, __nv_bfloat16* out, int T, int n_heads,
                           int n_kv_heads, int head_dim, cudaStream_t stream,
                           const AttnSequences* seqs, bool probe);

}  // namespace clef::engine::cuda

// The Hopper attention kernel (flash_wgmma.cu): attention_core.h's contract on warpgroup MMAs,
// sm_90 only. Internal to attention/ and its tests; tuning.h exposes it as the "wg64" / "wg64o" /
// "wg64o4" variants (key tiles of 64 rows, 128 query rows per tile, 256 with 4 warpgroups; o:
// softmax overlapped with P V).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "engine/cuda/attention/attention_core.h"

namespace clef::engine::cuda {

// Descriptor convention of the kernel's shared-memory operands, as two bits; 0 (the one the kernel
// runs) is the PTX ISA's: the leading byte offset is the stride between core matrices along K and
// the stride byte offset the one across 8-row (M / N) groups, for the K-major Q and K and for the
// MN-major V alike. Bit 0 swaps the two for Q and K, bit 1 for V: attention_wgmma_test runs all
// four on the H200 and only 0 computes attention (rel. L2 0.002 against >1.2 for the others).
constexpr int kWgmmaLayout = 0;

// Head dims there is a kernel for (two warpgroups: 64, 72, 80, 128, 256; overlapped: 64, 72, 80,
// 128; four warpgroups: overlapped at 64, 72, 80; key tiles of 64), and whether this device runs
// it (sm_90, shared memory). A CTA of W warpgroups takes 64 W query rows.
// kv_tiled: K and V in key tiles (kv_tiles.h; four warpgroups, overlapped, head dims 72 and 80;
// two, not overlapped, at 256).
bool wgmma_attention_built(int head_dim, bool overlap, int warpgroups = 2, bool kv_tiled = false);
bool wgmma_attention_supported(int head_dim, bool overlap, int warpgroups = 2,
                               bool kv_tiled = false);
int wgmma_attention_rows_per_tile(int warpgroups = 2);  // 128 or 256

// overlap: the softmax of key tile j + 1 runs while the tensor cores compute P_j V_j (three K/V
// stages); otherwise each tile's products and softmax run one after the other (two stages).
// Throws std::invalid_argument where !wgmma_attention_supported, or on bad shapes.
void attention_core_bf16_wgmma(bool overlap, int warpgroups, const __nv_bfloat16* q,
                               const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* out,
                               int T, int n_heads, int n_kv_heads, int head_dim,
                               cudaStream_t stream, const AttnSequences* seqs = nullptr);

// The kernel reading K and V in key tiles (kv_tiles.h: k_tiles and v_tiles hold
// kv_tiled_elems(T, n_kv_heads, head_dim) elements, made for this T), each stage one pair of bulk
// copies: four warpgroups, overlapped, at head dims 72 and 80 (wg64o4t / wg64o4te); two, not
// overlapped, with a producer warp and release_barriers, at 256 (wg64te). q, out and seqs as
// attention_core.h. release_barriers: each stage refilled once every warp has released it on an
// mbarrier, instead of after a CTA barrier per key tile.
void attention_core_bf16_wgmma_kv_tiled(bool overlap, int warpgroups, const __nv_bfloat16* q,
                                        const __nv_bfloat16* k_tiles, const __nv_bfloat16* v_tiles,
                                        __nv_bfloat16* out, int T, int n_heads, int n_kv_heads,
                                        int head_dim, cudaStream_t stream,
                                        const AttnSequences* seqs = nullptr,
                                        bool release_barriers = false);

// The kernel with another descriptor convention (the probe test; the kernel's shared-memory slack
// past its tiles lets a wrong convention read garbage rather than fault).
void attention_wgmma_probe(bool overlap, int layout, const __nv_bfloat16* q, const __nv_bfloat16* k,
                           const __nv_bfloat16* v, __nv_bfloat16* out, int T, int n_heads,
                           int n_kv_heads, int head_dim, cudaStream_t stream,
                           const AttnSequences* seqs);

}  // namespace clef::engine::cuda

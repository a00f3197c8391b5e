// Internal knobs of attention_core_bf16 for tests and tuning: the kernel shape (4 or 8 warps of 16
// query rows per CTA), the kernel variants (K/V pipeline depth, Q in registers) and the heuristic
// that attention_core_bf16 uses to pick its shape.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "engine/cuda/attention/attention_core.h"

namespace clef::engine::cuda {

void attention_core_bf16_warps(int warps, const __nv_bfloat16* q, const __nv_bfloat16* k,
                               const __nv_bfloat16* v, __nv_bfloat16* out, int T, int n_heads,
                               int n_kv_heads, int head_dim, cudaStream_t stream,
                               const AttnSequences* seqs = nullptr);

// The warps attention_core_bf16 uses for this shape on the current device.
int attention_core_bf16_pick_warps(int T, int n_heads, int head_dim);

// One bf16 kernel variant (engine/cuda/attention/flash_bf16.cuh). warps 4 or 8 of m_tiles (1 or
// 2) x 16 query rows each: attention_variant_rows_per_tile rows per tile (the packing's tile table
// must be built for it); stages 1 (one K and one V buffer, four barriers per key tile: the default
// kernel) or 2 (double-buffered K/V, one barrier per tile; refused where the device's shared memory
// is too small); q_in_regs: Q read into registers once instead of from shared memory every key
// tile; skip_rescale: O's rescale skipped when no row max of the warp moved (exact).
// wgmma_key_tile 64: the Hopper kernel instead (attention/flash_wgmma.h: two warpgroups, 128
// query rows a tile, K/V tiles of 64 keys; sm_90 only; named "wg64", or "wg64o" with
// wgmma_overlap: the softmax of the next key tile overlapping the current P V; its other fields
// read 8 warps, 2 (3 overlapped) stages, 1 m-tile; "wg64o4": 16 warps, four warpgroups, 256 query
// rows a tile); kv_tiled ("wg64o4t", head dims 72 and 80): wg64o4 reading K and V in key tiles
// (kv_tiles.h), each stage one pair of bulk copies -- the caller passes k and v in that layout;
// with release_barriers ("wg64o4te") a stage is refilled once every warp has released it on an
// mbarrier instead of after a CTA barrier per key tile; "wg64te" (head dim 256): wg64 reading key
// tiles, K and V on their own two-stage rings, each stage refilled by the last warp to release it;
// "wg64ote" the same with the softmax overlapped (attn_prep writes the backbone's tiles).
struct AttnVariant {
  int warps = 4;
  int stages = 1;
  bool q_in_regs = false;
  int m_tiles = 1;
  bool skip_rescale = false;
  int wgmma_key_tile = 0;
  bool wgmma_overlap = false;
  bool kv_tiled = false;
  bool release_barriers = false;
  bool operator==(const AttnVariant& o) const {  // (tuning.h is also compiled as CUDA C++17)
    return warps == o.warps && stages == o.stages && q_in_regs == o.q_in_regs &&
           m_tiles == o.m_tiles && skip_rescale == o.skip_rescale &&
           wgmma_key_tile == o.wgmma_key_tile && wgmma_overlap == o.wgmma_overlap &&
           kv_tiled == o.kv_tiled && release_barriers == o.release_barriers;
  }
};

// Every built variant, the default kernel shapes (4 and 8 warps, 1 stage, 1 m-tile, Q in shared
// memory) first. The default ones exist for every head dim; the others for head dims 64, 80, 128
// and 256, those of 2 m-tiles for 64, 80 and 128 only (their accumulators would not fit at 256),
// and w4m2s1 (the tower's pick) at 72.
std::vector<AttnVariant> attention_bf16_variants();

int attention_variant_rows_per_tile(const AttnVariant& v);

// "w4s1", "w8s2q", "w4m2s2r", ...: warps, m-tiles when 2, stages, q for Q in registers, r for the
// rescale skip.
// attention_variant_from_name throws std::invalid_argument for a name that is not a built variant.
std::string attention_variant_name(const AttnVariant& v);
AttnVariant attention_variant_from_name(const std::string& name);

// Whether attention_core_bf16_variant runs this variant at this (padded) head dim on the current
// device (built for it, and its shared memory within the device's opt-in limit, queried once per
// device).
bool attention_variant_supported(const AttnVariant& v, int head_dim);

// The variant attention_core_bf16 runs for this shape on the current device (its tile size is
// attention_rows_per_tile's): on sm_90 the Hopper kernel at head dims 72 and 80 (wg64o4, the
// vision tower) and 256 (wg64, the backbone); elsewhere, or with `generic`, w4m2s1 at 72 and 80,
// else the default shape of attention_core_bf16_pick_warps. CLEF_ATTN_PICK="80=w4s1,256=w8s2"
// overrides it per head dim (a Hopper name is ignored with `generic`). kv_tiled_ok: the caller can
// hand over K and V in key tiles (the vision tower, the backbone): on sm_90 wg64o4te then replaces
// wg64o4 and wg64ote (up to 8192 rows) or wg64te wg64;
// without it a kv_tiled variant is never picked (a CLEF_ATTN_PICK naming one is ignored).
AttnVariant attention_core_bf16_pick(int T, int n_heads, int head_dim, bool generic = false,
                                     bool kv_tiled_ok = false);

// attention_core_bf16 with the given variant (its tile table, if any, built for
// attention_variant_rows_per_tile rows per tile; k and v in key tiles for a kv_tiled variant).
// Throws std::invalid_argument for a variant not built or not supported here.
void attention_core_bf16_variant(const AttnVariant& variant, const __nv_bfloat16* q,
                                 const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* out,
                                 int T, int n_heads, int n_kv_heads, int head_dim,
                                 cudaStream_t stream, const AttnSequences* seqs = nullptr);

}  // namespace clef::engine::cuda

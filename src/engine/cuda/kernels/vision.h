// Row kernels of the vision tower (docs/spec/media.md §6-7; the float32 CPU tower in
// engine/cpu/vision_tower.cpp is the ground truth). Storage type E as in norm.h (__nv_bfloat16 =
// production, float = parity mode); arithmetic is fp32, rounded once to E at the end of each op
// unless said otherwise. Every op has a generic variant (scalar accesses, any width) and a vec8 one
// (16-byte accesses of 8 elements) taken under KernelPath::Auto when the widths are multiples of 8
// and the pointers 16-byte aligned; both compute the same fp32 expressions with the same rounding
// points (the LayerNorm's partial sums are added in another order). <op>_variant names the one a
// shape gets (alignment aside).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/cuda/kernel_path.h"

namespace clef::engine::cuda {

// LayerNorm per row with bias (eps 1e-6 in the tower): fp32 mean and variance (biased), then
// (x - mean) * rsqrt(var + eps) * w + b in fp32, rounded once to E. out may alias x.
// vec8: one warp per row, the row in registers (D a multiple of 8, at most 2048).
template <typename E>
void layer_norm(const E* x, const float* w, const float* b, E* out, int rows, int D, float eps,
                KernelPath path, cudaStream_t s);
const char* layer_norm_variant(int D, KernelPath path);

enum class GeluKind { Tanh, Erf };
// x = gelu(x) in place, fp32 math (tanh form exactly as PyTorch's gelu(approximate='tanh'); erf
// form 0.5 x (1 + erf(x / sqrt 2))), rounded to E.
template <typename E>
void gelu_inplace(E* x, size_t n, GeluKind kind, KernelPath path, cudaStream_t s);
const char* gelu_variant(KernelPath path);

// Adds the interpolated learned position embedding (media.md §7; CPU: vision_position_embedding)
// to x's rows [row0, row0 + t*h*w) of width W: row row0 + s*h*w + i gets patch i's embedding
// (block-major patch order) for every temporal slice s. table: [side*side, W] in E. The 4
// products are rounded (no FMA) before the fp32 sum ((p0+p1)+p2)+p3, the sum is rounded once to
// E, then x = E(float(x) + float(pos)).
template <typename E>
void vision_pos_embed_add(E* x, int row0, const E* table, int side, int t, int h, int w, int W,
                          KernelPath path, cudaStream_t s);
const char* vision_pos_embed_add_variant(int W, KernelPath path);

// 2-D RoPE and the split for the attention core: qkv [rows, 3*heads*hd] (q | k | v, head j at
// j*hd) -> q, k, v [rows, heads, hdp] (hdp >= hd; columns hd..hdp-1 written as 0). q and k rotated
// rotate-half over the whole hd with the row's angles: cos/sin slot i < hd/2 uses
// (i < hd/4 ? r * inv_freq[i] : c * inv_freq[i - hd/4]), fp32 product, accurate cosf/sinf;
// applied in fp32 then rounded to E (what the CPU tower computes). v copied.
// rc: device [rows][2] = (r, c) of each row's patch; inv_freq: device [hd/4].
// kv_tiled: k and v written in key tiles (attention/kv_tiles.h, for attention head dim hdp and
// these rows; zeros in its padding columns and rows) for the Hopper kernel's wg64o4t, q as above;
// only the vec8 kernel writes them (vision_rope_split_tiles_kv), std::invalid_argument otherwise.
struct VisionRopeArgs {
  int rows, heads, hd, hdp;
  const int32_t* rc;
  const float* inv_freq;
  bool kv_tiled = false;
};
// vec8 (hd and hdp multiples of 8): a thread per 8-column chunk of a head writes that chunk of q, k
// and v; the rotate-half partners (hd / 2 away, a multiple of 4 but not always of 8: at hd 72 the
// chunk of columns 32..39 straddles the half) are read as two 4-element groups.
template <typename E>
void vision_rope_split(const E* qkv, E* q, E* k, E* v, const VisionRopeArgs& a, KernelPath path,
                       cudaStream_t s);
const char* vision_rope_split_variant(const VisionRopeArgs& a, KernelPath path);
bool vision_rope_split_tiles_kv(const VisionRopeArgs& a, KernelPath path);

// dst[dst_rows[i] * ld + j] = src[i * D + j] for i < n, j < D (the tower's rows replace the pad
// embeddings in the backbone's residual stream).
template <typename E>
void scatter_rows(E* dst, int ld, const E* src, const int32_t* dst_rows, int n, int D,
                  KernelPath path, cudaStream_t s);
const char* scatter_rows_variant(int D, int ld, bool bf16, KernelPath path);

// The host table behind VisionRopeArgs::inv_freq, computed as the CPU tower does:
// inv_freq[i] = float(1 / theta^double(float(2i) / float(head_dim / 2))), i < head_dim / 4.
std::vector<float> vision_rope_inv_freq(int head_dim, double theta);

}  // namespace clef::engine::cuda

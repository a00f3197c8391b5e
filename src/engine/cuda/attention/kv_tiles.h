// K and V in key tiles, for the Hopper kernel's "t" variants (tuning.h: wg64o4t): each kv head's
// rows in blocks of kKvTileRows, each block stored as the exact shared-memory image the kernel's
// wgmma descriptors read (flash_wgmma.cu's no-swizzle canonical layout: 8 x 16-byte core matrices,
// element (r, c) of a block at ((r / 8) (C / 8) + c / 8) 64 + (r % 8) 8 + c % 8, C the head dim
// rounded up to wgmma's k-step of 16). One bulk copy then moves a whole tile: with 16-byte
// cp.async per chunk the L2's request rate bound the kernel (perf-log v13). Columns past the head
// dim and rows past T are zeros (the producer writes them). Two layouts of the blocks:
//   * by global row (kv_tiled_index): row r in block r / 64. A packed sequence that starts inside a
//     block shares it with its neighbour, whose keys the kernel masks; its keys are then cut into
//     other tiles than alone, so the online softmax rounds otherwise (the vision tower's segments).
//   * per sequence (a packed backbone forward): sequence s starts a block of its own,
//     kv_seq_block0(begin_s, s), so its keys fall into the same tiles as when it runs alone, and
//     the kernel computes its rows bit for bit as alone (batch invariance). The row -> tiled row
//     map is a table (PackTables::kv_rows); a kv head holds kv_head_blocks(T, sequences) blocks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace clef::engine::cuda {

constexpr int kKvTileRows = 64;

__host__ __device__ constexpr int kv_tile_cols(int head_dim) {
  return (head_dim + 15) / 16 * 16;
}
__host__ __device__ constexpr int kv_tile_blocks(int T) {
  return (T + kKvTileRows - 1) / kKvTileRows;
}
// Blocks a kv head holds for T rows packed as `sequences` sequences in per-sequence blocks (each
// sequence after the first may start one block later than its first row's block; 1: the global
// row layout's kv_tile_blocks(T)).
__host__ __device__ constexpr int kv_head_blocks(int T, int sequences) {
  return kv_tile_blocks(T) + (sequences > 1 ? sequences - 1 : 0);
}
// The first block of sequence s (0-based) starting at row `begin`, per-sequence layout: blocks
// floor(begin / 64) + s on never overlap the previous sequence's (its last block is at most
// floor(begin_s / 64) + s - 1 + ceil(len / 64) - 1 < the next one's first).
__host__ __device__ constexpr int kv_seq_block0(int begin, int s) {
  return begin / kKvTileRows + s;
}
// Elements of one tiled tensor of T rows and n_kv heads (in up to `sequences` per-sequence runs).
__host__ __device__ constexpr size_t kv_tiled_elems(int T, int n_kv, int head_dim,
                                                    int sequences = 1) {
  return static_cast<size_t>(n_kv) * kv_head_blocks(T, sequences) * kKvTileRows *
         kv_tile_cols(head_dim);
}
// Where element (tiled_row, head, col) sits among head_blocks blocks a head (col < kv_tile_cols).
__host__ __device__ constexpr size_t kv_tiled_at(int tiled_row, int head, int col, int head_blocks,
                                                 int head_dim) {
  const int cols = kv_tile_cols(head_dim), r = tiled_row % kKvTileRows;
  return (static_cast<size_t>(head) * head_blocks + tiled_row / kKvTileRows) * kKvTileRows * cols +
         static_cast<size_t>(((r / 8) * (cols / 8) + col / 8) * 64 + (r % 8) * 8 + col % 8);
}
// Where element (row, head, col) of a [T, n_kv, head_dim] tensor sits, global row layout.
__host__ __device__ constexpr size_t kv_tiled_index(int row, int head, int col, int T,
                                                    int head_dim) {
  return kv_tiled_at(row, head, col, kv_tile_blocks(T), head_dim);
}

// dst (kv_tiled_elems) = src [T, n_kv, head_dim] in key tiles, zeros where there is no element
// (head_dim a multiple of 8; pointers 16-byte aligned). For the tests and the workbench, and for a
// producer that cannot write the tiles itself.
void tile_kv_bf16(const __nv_bfloat16* src, __nv_bfloat16* dst, int T, int n_kv, int head_dim,
                  cudaStream_t stream);

}  // namespace clef::engine::cuda

// K and V in key tiles, for the Hopper kernel's "t" variants (tuning.h: wg64o4t): each kv head's
// rows in blocks of kKvTileRows, each block stored as the exact shared-memory image the kernel's
// wgmma descriptors read (flash_wgmma.cu's no-swizzle canonical layout: 8 x 16-byte core matrices,
// element (r, c) of a block at ((r / 8) (C / 8) + c / 8) 64 + (r % 8) 8 + c % 8, C the head dim
// rounded up to wgmma's k-step of 16). One bulk copy then moves a whole tile: with 16-byte
// cp.async per chunk the L2's request rate bound the kernel (perf-log v13). Columns past the head
// dim and rows past T are zeros (the producer writes them). Blocks follow the global row index, not
// the sequences: a packed sequence that starts inside a block shares it with its neighbour, whose
// keys the kernel masks.
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
// Elements of one tiled tensor of T rows and n_kv heads.
__host__ __device__ constexpr size_t kv_tiled_elems(int T, int n_kv, int head_dim) {
  return static_cast<size_t>(n_kv) * kv_tile_blocks(T) * kKvTileRows * kv_tile_cols(head_dim);
}
// Where element (row, head, col) of a [T, n_kv, head_dim] tensor sits (col < kv_tile_cols).
__host__ __device__ constexpr size_t kv_tiled_index(int row, int head, int col, int T,
                                                    int head_dim) {
  const int cols = kv_tile_cols(head_dim), r = row % kKvTileRows;
  return (static_cast<size_t>(head) * kv_tile_blocks(T) + row / kKvTileRows) * kKvTileRows * cols +
         static_cast<size_t>(((r / 8) * (cols / 8) + col / 8) * 64 + (r % 8) * 8 + col % 8);
}

// dst (kv_tiled_elems) = src [T, n_kv, head_dim] in key tiles, zeros where there is no element
// (head_dim a multiple of 8; pointers 16-byte aligned). For the tests and the workbench, and for a
// producer that cannot write the tiles itself.
void tile_kv_bf16(const __nv_bfloat16* src, __nv_bfloat16* dst, int T, int n_kv, int head_dim,
                  cudaStream_t stream);

}  // namespace clef::engine::cuda

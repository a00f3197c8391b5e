// tile_kv_bf16 (kv_tiles.h): one thread per 16-byte chunk of the tiled tensor.
#include "engine/cuda/attention/kv_tiles.h"

#include <stdexcept>
#include <string>

#include "engine/cuda/cuda_check.h"

namespace clef::engine::cuda {
namespace {

__global__ void tile_kv_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int T,
                               int n_kv, int hd, size_t chunks) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= chunks) return;
  const int cols8 = kv_tile_cols(hd) / 8, per_block = kKvTileRows * cols8;
  const size_t hb = i / per_block;  // head * blocks + block
  const int in = static_cast<int>(i % per_block);
  const int core = in / 8, r8 = in % 8;  // core matrix ((r / 8) cols8 + c / 8), its row r % 8
  const int r = (core / cols8) * 8 + r8, c8 = core % cols8;
  const int blocks = kv_tile_blocks(T);
  const int head = static_cast<int>(hb / blocks),
            row = static_cast<int>(hb % blocks) * kKvTileRows + r;
  uint4 val = make_uint4(0, 0, 0, 0);
  if (row < T && c8 < hd / 8) val = src[(static_cast<size_t>(row) * n_kv + head) * (hd / 8) + c8];
  dst[i] = val;
}

}  // namespace

void tile_kv_bf16(const __nv_bfloat16* src, __nv_bfloat16* dst, int T, int n_kv, int head_dim,
                  cudaStream_t stream) {
  if (T < 0 || n_kv <= 0 || head_dim <= 0 || head_dim % 8 != 0)
    throw std::invalid_argument("tile_kv_bf16: bad shape (T " + std::to_string(T) + ", heads " +
                                std::to_string(n_kv) + ", head_dim " + std::to_string(head_dim) +
                                ")");
  if ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 16 != 0)
    throw std::invalid_argument("tile_kv_bf16: pointers must be 16-byte aligned");
  const size_t chunks = kv_tiled_elems(T, n_kv, head_dim) / 8;
  if (chunks == 0) return;
  constexpr int kThreads = 256;
  tile_kv_kernel<<<static_cast<unsigned>((chunks + kThreads - 1) / kThreads), kThreads, 0,
                   stream>>>(reinterpret_cast<const uint4*>(src), reinterpret_cast<uint4*>(dst), T,
                             n_kv, head_dim, chunks);
  CLEF_CUDA_LAUNCH_CHECK();
}

}  // namespace clef::engine::cuda

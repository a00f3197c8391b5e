// The device patchify (see patchify.h): one launch per image / video grid, the grid's frames and
// its first output row passed in; a thread finds its patch from its row as media::patch_coords
// does.
#include "engine/cuda/kernels/patchify.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/common.cuh"

namespace clef::engine::cuda {
namespace {

constexpr int kPatch = 16, kTemporal = 2, kValues = media::kPatchValues;
constexpr int kPlane = kTemporal * kPatch * kPatch;  // values of one channel in a row (512)
constexpr int kThreads = 256;

// One grid's geometry: frames (16 h) x (16 w) x 3 bytes each, `per_group` per temporal group (1:
// an image, whose frame is both slices; 2: a video).
struct GridArgs {
  const uint8_t* frames;
  int64_t frame_bytes;
  int t, h, w, per_group;
};

// Exactly the host's (float(x) - 127.5f) / 127.5f: the subtraction is exact, the division
// correctly rounded whatever the compiler flags.
__device__ __forceinline__ float normalise(uint32_t x) {
  return __fdiv_rn(__uint2float_rn(x) - 127.5f, 127.5f);
}

// The frame and the first pixel byte of patch row `row`'s temporal slice k at patch line y.
__device__ __forceinline__ const uint8_t* patch_line(const GridArgs& g, int64_t row, int k, int y) {
  const int64_t hw = static_cast<int64_t>(g.h) * g.w;
  const int64_t t = row / hw, i = row % hw;
  const int64_t block = i / 4, blocks_w = g.w / 2;  // media::patch_coords
  const int64_t r = block / blocks_w * 2 + i / 2 % 2, c = block % blocks_w * 2 + i % 2;
  const uint8_t* f = g.frames + (t * g.per_group + k % g.per_group) * g.frame_bytes;
  return f + ((r * kPatch + y) * g.w * kPatch + c * kPatch) * 3;
}

template <typename E>
__global__ void patchify_generic_kernel(GridArgs g, E* __restrict__ rows, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / kValues;
    const int v = static_cast<int>(i % kValues);
    const int c = v / kPlane, k = v / (kPatch * kPatch) % kTemporal, y = v / kPatch % kPatch,
              x = v % kPatch;
    rows[i] = from_f<E>(normalise(patch_line(g, row, k, y)[x * 3 + c]));
  }
}

// Item = (row, k, y, half): 64 per row, in the order of the 8-value chunks of a channel's plane,
// so a warp's stores of one channel are 32 consecutive chunks.
template <typename E>
__global__ void patchify_vec8_kernel(GridArgs g, E* __restrict__ rows, int64_t items) {
  const int64_t item = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (item >= items) return;
  constexpr int kPerRow = kPlane / 8;
  const int64_t row = item / kPerRow;
  const int q = static_cast<int>(item % kPerRow);
  const int k = q / (2 * kPatch), y = q / 2 % kPatch, half = q % 2;
  const uint2* src = reinterpret_cast<const uint2*>(patch_line(g, row, k, y) + half * 8 * 3);
  uint2 raw[3];
#pragma unroll
  for (int j = 0; j < 3; ++j) raw[j] = src[j];
  uint8_t px[24];
#pragma unroll
  for (int j = 0; j < 3; ++j) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      px[8 * j + b] = static_cast<uint8_t>(raw[j].x >> (8 * b));
      px[8 * j + 4 + b] = static_cast<uint8_t>(raw[j].y >> (8 * b));
    }
  }
  E* out = rows + row * kValues + q * 8;
#pragma unroll
  for (int c = 0; c < 3; ++c) {
    float f[8];
#pragma unroll
    for (int x = 0; x < 8; ++x) f[x] = normalise(px[3 * x + c]);
    st8(out + c * kPlane, pack8<E>(f));
  }
}

bool aligned8(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 7u) == 0;
}

}  // namespace

const char* patchify_rows_variant(KernelPath path) {
  return path == KernelPath::Auto ? "patchify_rows_vec8" : "patchify_rows_generic";
}

template <typename E>
void patchify_rows(const media::VisualInput& visual, const uint8_t* frames, E* rows,
                   KernelPath path, cudaStream_t s) {
  // Every frame is a multiple of 768 bytes: each grid's first frame keeps the buffer's alignment.
  const bool vec = path == KernelPath::Auto && aligned8(frames) && aligned16(rows);
  auto launch = [&](const media::Grid& grid, int per_group) {
    const GridArgs g{frames, media::frame_bytes(grid), grid.t, grid.h, grid.w, per_group};
    const int64_t patches = grid.patches();
    if (patches > 0) {
      if (vec) {
        const int64_t items = patches * (kPlane / 8);
        patchify_vec8_kernel<E>
            <<<static_cast<unsigned>((items + kThreads - 1) / kThreads), kThreads, 0, s>>>(g, rows,
                                                                                           items);
      } else {
        const int64_t n = patches * kValues;
        const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 8192);
        patchify_generic_kernel<E><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(g, rows, n);
      }
      CLEF_CUDA_LAUNCH_CHECK();
    }
    frames += g.frame_bytes * grid.t * per_group;
    rows += patches * kValues;
  };
  for (const media::Grid& g : visual.image_grids) launch(g, media::kImageFramesPerGroup);
  for (const media::Grid& g : visual.video_grids) launch(g, media::kVideoFramesPerGroup);
}

template void patchify_rows<float>(const media::VisualInput&, const uint8_t*, float*, KernelPath,
                                   cudaStream_t);
template void patchify_rows<__nv_bfloat16>(const media::VisualInput&, const uint8_t*,
                                           __nv_bfloat16*, KernelPath, cudaStream_t);

}  // namespace clef::engine::cuda

// Row kernels of the vision tower (see vision.h). Generic code: one block per row (LayerNorm, the
// position embedding, the RoPE split, the scatter) or a grid-stride loop (GELU); 16-byte accesses
// only where they are a plain copy or a map (GELU, scatter).
#include "engine/cuda/kernels/vision.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/common.cuh"

namespace clef::engine::cuda {
namespace {

constexpr int kLnRegs = 16;  // row values per thread kept in registers by the LayerNorm

// One block per row. x and out are not __restrict__: out may alias x (each thread writes only the
// elements it has read itself, after the last reduction).
template <typename E>
__global__ void layer_norm_kernel(const E* x, const float* __restrict__ w,
                                  const float* __restrict__ b, E* out, int D, float eps) {
  __shared__ float scratch[32];
  const E* xr = x + static_cast<size_t>(blockIdx.x) * D;
  E* orow = out + static_cast<size_t>(blockIdx.x) * D;
  const float fd = static_cast<float>(D);
  if (D <= kLnRegs * static_cast<int>(blockDim.x)) {  // the row in registers: one read
    float v[kLnRegs];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kLnRegs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      v[k] = i < D ? to_f(xr[i]) : 0.0f;
      sum += v[k];
    }
    const float mean = block_sum(sum, scratch) / fd;
    float sq = 0.0f;  // two passes: the variance of the centred values (no cancellation)
#pragma unroll
    for (int k = 0; k < kLnRegs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      const float d = i < D ? v[k] - mean : 0.0f;
      sq += d * d;
    }
    const float r = rsqrtf(block_sum(sq, scratch) / fd + eps);
#pragma unroll
    for (int k = 0; k < kLnRegs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < D) orow[i] = from_f<E>((v[k] - mean) * r * w[i] + b[i]);
    }
    return;
  }
  float sum = 0.0f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) sum += to_f(xr[i]);
  const float mean = block_sum(sum, scratch) / fd;
  float sq = 0.0f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    const float d = to_f(xr[i]) - mean;
    sq += d * d;
  }
  const float r = rsqrtf(block_sum(sq, scratch) / fd + eps);
  for (int i = threadIdx.x; i < D; i += blockDim.x)
    orow[i] = from_f<E>((to_f(xr[i]) - mean) * r * w[i] + b[i]);
}

template <GeluKind K>
__device__ __forceinline__ float gelu_f(float x) {
  if constexpr (K == GeluKind::Tanh) {
    // PyTorch's GeluCUDAKernelImpl (approximate='tanh'): kBeta = sqrt(2) * (2 / sqrt(pi)) / 2.
    constexpr float kBeta = 0.7978845608028654f, kKappa = 0.044715f;
    const float inner = kBeta * (x + kKappa * (x * x * x));
    return 0.5f * x * (1.0f + tanhf(inner));
  } else {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  }
}

template <typename E, GeluKind K>
__global__ void gelu_generic_kernel(E* __restrict__ x, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = from_f<E>(gelu_f<K>(to_f(x[i])));
}

// n / 8 chunks by 16-byte accesses (grid-stride), then the n % 8 tail elements.
template <typename E, GeluKind K>
__global__ void gelu_vec8_kernel(E* __restrict__ x, size_t n) {
  const size_t n8 = n / 8, stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t gid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (size_t c = gid; c < n8; c += stride) {
    float f[8];
    load8f(x + 8 * c, f);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = gelu_f<K>(f[j]);
    st8(x + 8 * c, pack8<E>(f));
  }
  if (gid < n - 8 * n8) x[8 * n8 + gid] = from_f<E>(gelu_f<K>(to_f(x[8 * n8 + gid])));
}

// One axis of the bilinear interpolation (media.md §7), the closed form of
// vision_position_embedding in fp32, every operation rounded on its own (no contraction).
struct Tap {
  int lo, hi;
  float w_lo, w_hi;
};
__device__ __forceinline__ Tap pos_tap(int i, int n, int side) {
  const float src = __fdiv_rn(__fmul_rn(static_cast<float>(i), static_cast<float>(side - 1)),
                              static_cast<float>(max(n - 1, 1)));
  const float ff = floorf(src);
  const int f = static_cast<int>(ff);
  const float frac = __fsub_rn(src, ff);
  return {min(f, side - 1), min(f + 1, side - 1), __fsub_rn(1.0f, fabsf(frac)),
          fmaxf(0.0f, __fsub_rn(1.0f, fabsf(__fsub_rn(frac, 1.0f))))};
}

// grid (t*h*w, ceil(W / kSlice)): block row p = s*h*w + i (slice s, patch i).
template <typename E>
__global__ void pos_embed_add_kernel(E* __restrict__ x, int row0, const E* __restrict__ table,
                                     int side, int h, int w, int W) {
  const int hw = h * w;
  const int i = static_cast<int>(blockIdx.x % hw);
  // Block-major patch order (media::patch_coords): merge block i / 4 row-major over
  // the (h/2) x (w/2) blocks, cell (i / 2 % 2, i % 2) inside it.
  const int blk = i / 4, blocks_w = w / 2;
  const int r = blk / blocks_w * 2 + i / 2 % 2, c = blk % blocks_w * 2 + i % 2;
  const Tap tr = pos_tap(r, h, side), tc = pos_tap(c, w, side);
  const size_t idx[4] = {
      static_cast<size_t>(tr.lo * side + tc.lo) * W, static_cast<size_t>(tr.lo * side + tc.hi) * W,
      static_cast<size_t>(tr.hi * side + tc.lo) * W, static_cast<size_t>(tr.hi * side + tc.hi) * W};
  const float wt[4] = {__fmul_rn(tr.w_lo, tc.w_lo), __fmul_rn(tr.w_lo, tc.w_hi),
                       __fmul_rn(tr.w_hi, tc.w_lo), __fmul_rn(tr.w_hi, tc.w_hi)};
  E* xr = x + (static_cast<size_t>(row0) + blockIdx.x) * W;
  const int d0 = blockIdx.y * kSlice + threadIdx.x;
#pragma unroll
  for (int k = 0; k < kSlice / kSliceThreads; ++k) {
    const int d = d0 + k * kSliceThreads;
    if (d >= W) break;
    const float p0 = __fmul_rn(to_f(table[idx[0] + d]), wt[0]);
    const float p1 = __fmul_rn(to_f(table[idx[1] + d]), wt[1]);
    const float p2 = __fmul_rn(to_f(table[idx[2] + d]), wt[2]);
    const float p3 = __fmul_rn(to_f(table[idx[3] + d]), wt[3]);
    const float pos = rnd<E>(__fadd_rn(__fadd_rn(__fadd_rn(p0, p1), p2), p3));
    xr[d] = from_f<E>(__fadd_rn(to_f(xr[d]), pos));
  }
}

// One block per row: the row's hd/2 cos/sin values in shared memory, then every element of its
// q, k, v heads (hdp wide). Products and sums rounded like the CPU tower's apply_rope
// (x1*cos - x2*sin, x2*cos + x1*sin, no contraction).
template <typename E>
__global__ void vision_rope_split_kernel(const E* __restrict__ qkv, E* __restrict__ q,
                                         E* __restrict__ k, E* __restrict__ v, VisionRopeArgs a) {
  extern __shared__ float cs[];  // cos [hd/2] | sin [hd/2]
  const int half = a.hd / 2, quarter = a.hd / 4;
  const size_t row = blockIdx.x;
  const float pr = static_cast<float>(a.rc[2 * row]), pc = static_cast<float>(a.rc[2 * row + 1]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float ang =
        i < quarter ? __fmul_rn(pr, a.inv_freq[i]) : __fmul_rn(pc, a.inv_freq[i - quarter]);
    cs[i] = cosf(ang);
    cs[half + i] = sinf(ang);
  }
  __syncthreads();
  const int width = a.heads * a.hd, per = a.heads * a.hdp;
  const E* src = qkv + row * 3 * width;
  for (int e = threadIdx.x; e < 3 * per; e += blockDim.x) {
    const int part = e / per, rem = e - part * per;
    const int j = rem / a.hdp, i = rem - j * a.hdp;
    E* dst = (part == 0 ? q : part == 1 ? k : v) + row * per + rem;
    if (i >= a.hd) {
      *dst = from_f<E>(0.0f);
      continue;
    }
    const E* hs = src + static_cast<size_t>(part) * width + static_cast<size_t>(j) * a.hd;
    if (part == 2) {
      *dst = hs[i];
      continue;
    }
    const bool lo = i < half;
    const int slot = lo ? i : i - half;
    const float cv = cs[slot], sv = cs[half + slot];
    const float self = to_f(hs[i]), partner = to_f(hs[lo ? i + half : i - half]);
    const float o = lo ? __fsub_rn(__fmul_rn(self, cv), __fmul_rn(partner, sv))
                       : __fadd_rn(__fmul_rn(self, cv), __fmul_rn(partner, sv));
    *dst = from_f<E>(o);
  }
}

template <typename E>
__global__ void scatter_rows_generic_kernel(E* __restrict__ dst, int ld, const E* __restrict__ src,
                                            const int32_t* __restrict__ dst_rows, int D) {
  const size_t i = blockIdx.x;
  E* drow = dst + static_cast<size_t>(dst_rows[i]) * ld;
  const E* srow = src + i * D;
  const int j0 = blockIdx.y * kSlice + threadIdx.x;
#pragma unroll
  for (int r = 0; r < kSlice / kSliceThreads; ++r) {
    const int j = j0 + r * kSliceThreads;
    if (j < D) drow[j] = srow[j];
  }
}

// Rows in 16-byte words: grid (n, ceil(words / kVecChunks)), words per row, ld_words row stride.
__global__ void scatter_rows_vec_kernel(uint4* __restrict__ dst, int ld_words,
                                        const uint4* __restrict__ src,
                                        const int32_t* __restrict__ dst_rows, int words) {
  const size_t i = blockIdx.x;
  uint4* drow = dst + static_cast<size_t>(dst_rows[i]) * ld_words;
  const uint4* srow = src + i * words;
  const int c0 = blockIdx.y * kVecChunks + threadIdx.x;
  uint4 v[kVecPerThread];
#pragma unroll
  for (int r = 0; r < kVecPerThread; ++r) {
    const int c = c0 + r * kVecThreads;
    if (c < words) v[r] = srow[c];
  }
#pragma unroll
  for (int r = 0; r < kVecPerThread; ++r) {
    const int c = c0 + r * kVecThreads;
    if (c < words) drow[c] = v[r];
  }
}

// out[i] = bf16(in[i]), round to nearest even (what the reference's pixel_values.to(bfloat16)
// does).
__global__ void float_to_bf16_kernel(const float* __restrict__ in, __nv_bfloat16* __restrict__ out,
                                     size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

int grid_stride_blocks(size_t items) {
  return static_cast<int>(std::min<size_t>((items + 255) / 256, 8192));
}

}  // namespace

template <typename E>
void layer_norm(const E* x, const float* w, const float* b, E* out, int rows, int D, float eps,
                cudaStream_t s) {
  if (rows <= 0) return;
  if (D <= 0) throw std::invalid_argument("layer_norm: row width must be positive");
  const int threads = std::min(1024, std::max(128, (D + kLnRegs - 1) / kLnRegs + 31) / 32 * 32);
  layer_norm_kernel<E><<<rows, threads, 0, s>>>(x, w, b, out, D, eps);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void gelu_inplace(E* x, size_t n, GeluKind kind, cudaStream_t s) {
  if (n == 0) return;
  const bool vec = aligned16(x);
  const int blocks = grid_stride_blocks(vec ? std::max<size_t>(n / 8, 1) : n);
  if (kind == GeluKind::Tanh) {
    if (vec)
      gelu_vec8_kernel<E, GeluKind::Tanh><<<blocks, 256, 0, s>>>(x, n);
    else
      gelu_generic_kernel<E, GeluKind::Tanh><<<blocks, 256, 0, s>>>(x, n);
  } else {
    if (vec)
      gelu_vec8_kernel<E, GeluKind::Erf><<<blocks, 256, 0, s>>>(x, n);
    else
      gelu_generic_kernel<E, GeluKind::Erf><<<blocks, 256, 0, s>>>(x, n);
  }
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void vision_pos_embed_add(E* x, int row0, const E* table, int side, int t, int h, int w, int W,
                          cudaStream_t s) {
  if (side < 1 || W < 1 || t < 1 || h < 2 || w < 2 || h % 2 != 0 || w % 2 != 0 || row0 < 0) {
    throw std::invalid_argument("vision_pos_embed_add: grid (" + std::to_string(t) + ", " +
                                std::to_string(h) + ", " + std::to_string(w) +
                                ") is not t >= 1 slices of an even h x w of patches (side " +
                                std::to_string(side) + ", width " + std::to_string(W) + ")");
  }
  const int64_t rows = static_cast<int64_t>(t) * h * w;
  if (rows > INT32_MAX) throw std::invalid_argument("vision_pos_embed_add: too many patches");
  pos_embed_add_kernel<E>
      <<<dim3(static_cast<unsigned>(rows), (W + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(
          x, row0, table, side, h, w, W);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void vision_rope_split(const E* qkv, E* q, E* k, E* v, const VisionRopeArgs& a, cudaStream_t s) {
  if (a.rows <= 0) return;
  if (a.heads < 1 || a.hd < 4 || a.hd % 4 != 0 || a.hdp < a.hd)
    throw std::invalid_argument("vision_rope_split: head dim " + std::to_string(a.hd) +
                                " (a positive multiple of 4 needed), padded " +
                                std::to_string(a.hdp) + ", heads " + std::to_string(a.heads));
  vision_rope_split_kernel<E>
      <<<a.rows, 256, static_cast<size_t>(a.hd) * sizeof(float), s>>>(qkv, q, k, v, a);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void scatter_rows(E* dst, int ld, const E* src, const int32_t* dst_rows, int n, int D,
                  cudaStream_t s) {
  if (n <= 0 || D <= 0) return;
  if (ld < D) throw std::invalid_argument("scatter_rows: destination stride below the row width");
  const size_t row_bytes = static_cast<size_t>(D) * sizeof(E);
  const size_t ld_bytes = static_cast<size_t>(ld) * sizeof(E);
  if (row_bytes % 16 == 0 && ld_bytes % 16 == 0 && aligned16(dst) && aligned16(src)) {
    const int words = static_cast<int>(row_bytes / 16);
    scatter_rows_vec_kernel<<<dim3(n, (words + kVecChunks - 1) / kVecChunks), kVecThreads, 0, s>>>(
        reinterpret_cast<uint4*>(dst), static_cast<int>(ld_bytes / 16),
        reinterpret_cast<const uint4*>(src), dst_rows, words);
  } else {
    scatter_rows_generic_kernel<E>
        <<<dim3(n, (D + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(dst, ld, src, dst_rows, D);
  }
  CLEF_CUDA_LAUNCH_CHECK();
}

void float_to_bf16(const float* in, __nv_bfloat16* out, size_t n, cudaStream_t s) {
  if (n == 0) return;
  float_to_bf16_kernel<<<grid_stride_blocks(n), 256, 0, s>>>(in, out, n);
  CLEF_CUDA_LAUNCH_CHECK();
}

std::vector<float> vision_rope_inv_freq(int head_dim, double theta) {
  const int half = head_dim / 2, quarter = head_dim / 4;
  std::vector<float> f(std::max(quarter, 0));
  for (int i = 0; i < quarter; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(half);
    f[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(expo)));
  }
  return f;
}

#define CLEF_INSTANTIATE(E)                                                                        \
  template void layer_norm<E>(const E*, const float*, const float*, E*, int, int, float,           \
                              cudaStream_t);                                                       \
  template void gelu_inplace<E>(E*, size_t, GeluKind, cudaStream_t);                               \
  template void vision_pos_embed_add<E>(E*, int, const E*, int, int, int, int, int, cudaStream_t); \
  template void vision_rope_split<E>(const E*, E*, E*, E*, const VisionRopeArgs&, cudaStream_t);   \
  template void scatter_rows<E>(E*, int, const E*, const int32_t*, int, int, cudaStream_t);
CLEF_INSTANTIATE(float)
CLEF_INSTANTIATE(__nv_bfloat16)
#undef CLEF_INSTANTIATE

}  // namespace clef::engine::cuda

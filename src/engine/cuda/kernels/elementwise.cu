// Embedding gather, SwiGLU, float copy (see elementwise.h); generic and vec8 variants as in
// kernels/common.cuh.
#include "engine/cuda/kernels/elementwise.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/common.cuh"
#include "engine/cuda/kernels/fp8_rows.cuh"

namespace clef::engine::cuda {
namespace {

template <typename E>
__global__ void embed_gather_generic_kernel(const E* __restrict__ table,
                                            const int32_t* __restrict__ ids, E* __restrict__ out,
                                            int D) {
  const size_t t = blockIdx.x;
  const E* row = table + static_cast<size_t>(ids[t]) * D;
  const int i0 = blockIdx.y * kSlice + threadIdx.x;
#pragma unroll
  for (int r = 0; r < kSlice / kSliceThreads; ++r) {
    const int i = i0 + r * kSliceThreads;
    if (i < D) out[t * D + i] = row[i];
  }
}

// Column of feature i's gate in a gate_up row: [gate | up] (group 0), or blocks of `group` gate
// columns each followed by the same features' up columns (swiglu_gemm.h's regrouped weight); its
// up column is gate_col + up_offset(I, group).
__device__ __forceinline__ int gate_col(int i, int group) {
  return group ? (i / group) * 2 * group + i % group : i;
}
__device__ __forceinline__ int up_offset(int I, int group) {
  return group ? group : I;
}

template <typename E>
__global__ void swiglu_generic_kernel(const E* __restrict__ gu, E* __restrict__ out, int I,
                                      int group) {
  const size_t t = blockIdx.x;
  const int i0 = blockIdx.y * kSlice + threadIdx.x;
#pragma unroll
  for (int r = 0; r < kSlice / kSliceThreads; ++r) {
    const int i = i0 + r * kSliceThreads;
    if (i >= I) break;
    const size_t g = t * 2 * I + gate_col(i, group);
    const float gt = rnd<E>(silu_rounded_to<E>(to_f(gu[g])));
    out[t * I + i] = from_f<E>(gt * to_f(gu[g + up_offset(I, group)]));
  }
}

template <typename E>
__global__ void to_float_generic_kernel(const E* __restrict__ in, float* __restrict__ out,
                                        size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = to_f(in[i]);
}

// Row copy in 16-byte words: grid (T, ceil(W / kVecChunks)), W words per row.
__global__ void embed_gather_vec8_kernel(const uint4* __restrict__ table,
                                         const int32_t* __restrict__ ids, uint4* __restrict__ out,
                                         int W) {
  const size_t t = blockIdx.x;
  const uint4* row = table + static_cast<size_t>(ids[t]) * W;
  const int c0 = blockIdx.y * kVecChunks + threadIdx.x;
  uint4 v[kVecPerThread];
#pragma unroll
  for (int r = 0; r < kVecPerThread; ++r) {
    const int c = c0 + r * kVecThreads;
    if (c < W) v[r] = row[c];
  }
#pragma unroll
  for (int r = 0; r < kVecPerThread; ++r) {
    const int c = c0 + r * kVecThreads;
    if (c < W) out[t * W + c] = v[r];
  }
}

// grid (T, ceil(I / 8 / kVecChunks))
template <typename E>
__global__ void swiglu_vec8_kernel(const E* __restrict__ gu, E* __restrict__ out, int I,
                                   int group) {
  const size_t t = blockIdx.x;
  const E* row = gu + t * 2 * I;
  const int up = up_offset(I, group);
  E* orow = out + t * I;
  pairwise_chunks<E>(
      blockIdx.y * kVecChunks + threadIdx.x, I / 8,
      [&](int c) { return row + gate_col(8 * c, group); },
      [&](int c) { return row + gate_col(8 * c, group) + up; }, [&](int c) { return orow + 8 * c; },
      [](float g, float u) { return rnd<E>(silu_rounded_to<E>(g)) * u; });
}

// n8 chunks of 8 by 16-byte accesses (grid-stride), then the n % 8 tail elements.
template <typename E>
__global__ void to_float_vec8_kernel(const E* __restrict__ in, float* __restrict__ out, size_t n) {
  const size_t n8 = n / 8, stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t gid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (size_t c = gid; c < n8; c += stride) {
    float f[8];
    load8f(in + 8 * c, f);
    st8(out + 8 * c, pack8<float>(f));
  }
  if (gid < n - 8 * n8) out[8 * n8 + gid] = to_f(in[8 * n8 + gid]);
}

// SwiGLU's value (t, i) exactly as both swiglu variants compute it.
struct SwigluValue {
  const __nv_bfloat16* gu;
  int I;
  __device__ __nv_bfloat16 operator()(int t, int i) const {
    const size_t r = static_cast<size_t>(t) * 2 * I;
    const float gt = rnd<__nv_bfloat16>(silu_rounded_to<__nv_bfloat16>(to_f(gu[r + i])));
    return from_f<__nv_bfloat16>(gt * to_f(gu[r + I + i]));
  }
};

bool embed_gather_vec8_shape(size_t row_bytes) {
  return row_bytes % 16 == 0;
}
bool swiglu_vec8_shape(int I) {
  return I % 8 == 0;
}

}  // namespace

const char* embed_gather_variant(int D, bool bf16, KernelPath path) {
  const size_t row_bytes = static_cast<size_t>(D) * (bf16 ? sizeof(__nv_bfloat16) : sizeof(float));
  return path == KernelPath::Auto && embed_gather_vec8_shape(row_bytes) ? "embed_gather_vec8"
                                                                        : "embed_gather_generic";
}

const char* swiglu_variant(int I, KernelPath path) {
  return path == KernelPath::Auto && swiglu_vec8_shape(I) ? "swiglu_vec8" : "swiglu_generic";
}

const char* to_float_variant(KernelPath path) {
  return path == KernelPath::Auto ? "to_float_vec8" : "to_float_generic";
}

template <typename E>
void embed_gather(const E* table, const int32_t* ids, E* out, int T, int D, KernelPath path,
                  cudaStream_t s) {
  if (T <= 0) return;
  const size_t row_bytes = static_cast<size_t>(D) * sizeof(E);
  if (path == KernelPath::Auto && embed_gather_vec8_shape(row_bytes) && aligned16(table) &&
      aligned16(out)) {
    const int W = static_cast<int>(row_bytes / 16);
    embed_gather_vec8_kernel<<<dim3(T, (W + kVecChunks - 1) / kVecChunks), kVecThreads, 0, s>>>(
        reinterpret_cast<const uint4*>(table), ids, reinterpret_cast<uint4*>(out), W);
  } else {
    embed_gather_generic_kernel<E>
        <<<dim3(T, (D + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(table, ids, out, D);
  }
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void swiglu(const E* gu, E* out, int T, int I, KernelPath path, cudaStream_t s, int group) {
  if (T <= 0) return;
  if (group < 0 || (group && (group % 8 != 0 || I % group != 0)))
    throw std::invalid_argument("swiglu: group " + std::to_string(group) +
                                " is not 0 or a multiple of 8 dividing I = " + std::to_string(I));
  if (path == KernelPath::Auto && swiglu_vec8_shape(I) && aligned16(gu) && aligned16(out)) {
    swiglu_vec8_kernel<E>
        <<<dim3(T, (I / 8 + kVecChunks - 1) / kVecChunks), kVecThreads, 0, s>>>(gu, out, I, group);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  swiglu_generic_kernel<E>
      <<<dim3(T, (I + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(gu, out, I, group);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void to_float(const E* in, float* out, size_t n, KernelPath path, cudaStream_t s) {
  if (n == 0) return;
  if (path == KernelPath::Auto && aligned16(in) && aligned16(out)) {
    const size_t n8 = std::max<size_t>(n / 8, 1);
    const int blocks = static_cast<int>(std::min<size_t>((n8 + 255) / 256, 4096));
    to_float_vec8_kernel<E><<<blocks, 256, 0, s>>>(in, out, n);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  const int blocks = static_cast<int>(std::min<size_t>((n + 255) / 256, 4096));
  to_float_generic_kernel<E><<<blocks, 256, 0, s>>>(in, out, n);
  CLEF_CUDA_LAUNCH_CHECK();
}

void swiglu_fp8(const __nv_bfloat16* gu, __nv_bfloat16* out, int T, int I, const Fp8Rows& f,
                cudaStream_t s) {
  if (T <= 0) return;
  check_fp8_rows("swiglu_fp8", I, f, T);
  fp8_elementwise_rows_kernel<<<T, 512, static_cast<size_t>(I) * sizeof(__nv_bfloat16), s>>>(
      I, SwigluValue{gu, I}, out, I, f);
  CLEF_CUDA_LAUNCH_CHECK();
}

#define CLEF_INSTANTIATE(E)                                                                        \
  template void embed_gather<E>(const E*, const int32_t*, E*, int, int, KernelPath, cudaStream_t); \
  template void swiglu<E>(const E*, E*, int, int, KernelPath, cudaStream_t, int);                  \
  template void to_float<E>(const E*, float*, size_t, KernelPath, cudaStream_t);
CLEF_INSTANTIATE(float)
CLEF_INSTANTIATE(__nv_bfloat16)
#undef CLEF_INSTANTIATE

}  // namespace clef::engine::cuda

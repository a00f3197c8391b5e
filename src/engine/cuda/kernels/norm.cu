// RMSNorm1p and the gated RMSNorm (see norm.h); generic and vec8 variants as in kernels/common.cuh.
#include "engine/cuda/kernels/norm.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/common.cuh"
#include "engine/cuda/kernels/fp8_rows.cuh"

namespace clef::engine::cuda {
namespace {

constexpr int kNormRegs = 16;  // row values kept in registers by the RMSNorm kernel
constexpr int kNormVec = 4;    // 8-element chunks of a row per thread in the vector RMSNorm

// Q: the row also goes to f8 as FP8 (staged in shared memory; out may then be null).
template <typename E, bool Q>
__global__ void rms_norm_1p_generic_kernel(const E* __restrict__ x, int ldx,
                                           const float* __restrict__ w, E* __restrict__ out,
                                           int ldo, int D, float eps, Fp8Rows f8) {
  __shared__ float scratch[32];
  const E* xr = x + static_cast<size_t>(blockIdx.x) * ldx;
  E* orow = out ? out + static_cast<size_t>(blockIdx.x) * ldo : nullptr;
  auto store = [&](int i, E o) {
    if (!Q || orow) orow[i] = o;
    if constexpr (Q) fp8_stage()[i] = o;
  };
  float ss = 0.0f;
  if (D <=
      kNormRegs * static_cast<int>(blockDim.x)) {  // the row in registers: one pass over memory
    float v[kNormRegs];
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      v[k] = i < D ? to_f(xr[i]) : 0.0f;
      ss += v[k] * v[k];
    }
    const float r = rsqrtf(block_sum(ss, scratch) / static_cast<float>(D) + eps);
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < D) store(i, from_f<E>((v[k] * r) * (1.0f + w[i])));
    }
  } else {
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
      const float v = to_f(xr[i]);
      ss += v * v;
    }
    const float r = rsqrtf(block_sum(ss, scratch) / static_cast<float>(D) + eps);
    for (int i = threadIdx.x; i < D; i += blockDim.x)
      store(i, from_f<E>((to_f(xr[i]) * r) * (1.0f + w[i])));
  }
  if constexpr (Q) {
    __syncthreads();
    quantize_staged_row(fp8_stage(), D, blockIdx.x, f8);
  }
}

// The gated RMSNorm of (token t, head h) by the whole block (generic variant): y value i goes to
// put(i, value). Shared by the plain kernel and the FP8 one, so both compute the same values.
template <typename E, typename Put>
__device__ __forceinline__ void gated_head_generic(const E* __restrict__ o, const E* __restrict__ z,
                                                   int ldz, const float* __restrict__ w, size_t t,
                                                   int h, int H, int dv, float eps, float* scratch,
                                                   Put put) {
  const E* orow = o + (t * H + h) * dv;
  float val[kMaxPerThread];
  float ss = 0.0f;
#pragma unroll
  for (int r = 0; r < kMaxPerThread; ++r) {
    const int i = threadIdx.x + r * blockDim.x;
    val[r] = i < dv ? to_f(orow[i]) : 0.0f;
    ss += val[r] * val[r];
  }
  const float rs = rsqrtf(block_sum(ss, scratch) / static_cast<float>(dv) + eps);
#pragma unroll
  for (int r = 0; r < kMaxPerThread; ++r) {
    const int i = threadIdx.x + r * blockDim.x;
    if (i < dv) {
      const float n = rnd<E>(val[r] * rs);
      const float zw = rnd<E>(w[i] * n);
      const float zz = to_f(z[t * ldz + h * dv + i]);
      put(i, from_f<E>(zw * silu_rounded_to<E>(zz)));
    }
  }
}

// grid (T, H)
template <typename E>
__global__ void gated_rms_norm_generic_kernel(const E* __restrict__ o, const E* __restrict__ z,
                                              int ldz, const float* __restrict__ w,
                                              E* __restrict__ y, int H, int dv, float eps) {
  __shared__ float scratch[32];
  const size_t t = blockIdx.x;
  const int h = blockIdx.y;
  E* yrow = y + (t * H + h) * dv;
  gated_head_generic(o, z, ldz, w, t, h, H, dv, eps, scratch, [&](int i, E v) { yrow[i] = v; });
}

// grid T, block 128: every head of token t as the generic kernel computes it, staged, then FP8.
__global__ void gated_rms_norm_fp8_generic_kernel(const __nv_bfloat16* __restrict__ o,
                                                  const __nv_bfloat16* __restrict__ z, int ldz,
                                                  const float* __restrict__ w,
                                                  __nv_bfloat16* __restrict__ y, int H, int dv,
                                                  float eps, Fp8Rows f8) {
  __shared__ float scratch[32];
  const size_t t = blockIdx.x;
  __nv_bfloat16* stage = fp8_stage();
  for (int h = 0; h < H; ++h)
    gated_head_generic(o, z, ldz, w, t, h, H, dv, eps, scratch, [&](int i, __nv_bfloat16 v) {
      stage[h * dv + i] = v;
      if (y) y[(t * H + h) * dv + i] = v;
    });
  __syncthreads();
  quantize_staged_row(stage, H * dv, static_cast<int>(t), f8);
}

// One block per row, the row in registers (kNormVec chunks of 8 per thread), one __syncthreads.
template <typename E, bool Q>
__global__ void rms_norm_1p_vec8_kernel(const E* __restrict__ x, int ldx,
                                        const float* __restrict__ w, E* __restrict__ out, int ldo,
                                        int D, float eps, Fp8Rows f8) {
  __shared__ float scratch[32];
  const E* xr = x + static_cast<size_t>(blockIdx.x) * ldx;
  E* orow = out ? out + static_cast<size_t>(blockIdx.x) * ldo : nullptr;
  const int nc = D / 8;
  Vec8<E> raw[kNormVec];
#pragma unroll
  for (int k = 0; k < kNormVec; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    raw[k] = c < nc ? ld8(xr + 8 * c) : Vec8<E>{};
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kNormVec; ++k) {
    float v[8];
    unpack8(raw[k], v);
#pragma unroll
    for (int j = 0; j < 8; ++j) ss += v[j] * v[j];
  }
  const float r = rsqrtf(block_sum_once(ss, scratch) / static_cast<float>(D) + eps);
#pragma unroll
  for (int k = 0; k < kNormVec; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < nc) {
      float v[8], wv[8], o[8];
      unpack8(raw[k], v);
      load8f(w + 8 * c, wv);
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = (v[j] * r) * (1.0f + wv[j]);
      const Vec8<E> packed = pack8<E>(o);
      if (!Q || orow) st8(orow + 8 * c, packed);
      if constexpr (Q) st8(fp8_stage() + 8 * c, packed);
    }
  }
  if constexpr (Q) {
    __syncthreads();
    quantize_staged_row(fp8_stage(), D, blockIdx.x, f8);
  }
}

// The gated RMSNorm of 8 values of (token t, head h) by lane gl of an aligned group of lpg lanes
// (a power of two >= dv / 8, <= 32; every lane of the warp calls, inactive ones with
// active = false). Shared by the plain vec8 kernel and the FP8 one.
template <typename E>
__device__ __forceinline__ Vec8<E> gated_chunk_vec8(const E* __restrict__ o,
                                                    const E* __restrict__ z, int ldz,
                                                    const float* __restrict__ w, size_t row,
                                                    size_t t, int h, int gl, bool active, int dv,
                                                    int lpg, float eps) {
  Vec8<E> ov{}, zv{};
  if (active) {
    ov = ld8(o + row * dv + 8 * gl);
    zv = ld8(z + t * ldz + h * dv + 8 * gl);
  }
  float val[8];
  unpack8(ov, val);
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) ss += val[j] * val[j];
  ss = group_sum(ss, lpg);
  if (!active) return Vec8<E>{};
  const float rs = rsqrtf(ss / static_cast<float>(dv) + eps);
  float wv[8], zz[8], res[8];
  load8f(w + 8 * gl, wv);
  unpack8(zv, zz);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float n = rnd<E>(val[j] * rs);
    const float zw = rnd<E>(wv[j] * n);
    res[j] = zw * silu_rounded_to<E>(zz[j]);
  }
  return pack8<E>(res);
}

// Flat (token, head) rows of dv = 8 * (chunks) values; an aligned group of lpg lanes per row, 8
// values per lane; 256 threads = 256 / lpg rows per block.
template <typename E>
__global__ void gated_rms_norm_vec8_kernel(const E* __restrict__ o, const E* __restrict__ z,
                                           int ldz, const float* __restrict__ w, E* __restrict__ y,
                                           int T, int H, int dv, int lpg, float eps) {
  const size_t gid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t row = gid / lpg;  // t * H + h
  const int gl = static_cast<int>(gid % lpg);
  const bool active = row < static_cast<size_t>(T) * H && gl < dv / 8;
  const size_t t = active ? row / H : 0;
  const int h = active ? static_cast<int>(row % H) : 0;
  const Vec8<E> r = gated_chunk_vec8(o, z, ldz, w, row, t, h, gl, active, dv, lpg, eps);
  if (active) st8(y + row * dv + 8 * gl, r);
}

// grid T, block H * lpg (rounded up to a warp): token t's heads as the vec8 kernel computes them
// (the same aligned lane groups), staged, then FP8.
__global__ void gated_rms_norm_fp8_vec8_kernel(const __nv_bfloat16* __restrict__ o,
                                               const __nv_bfloat16* __restrict__ z, int ldz,
                                               const float* __restrict__ w,
                                               __nv_bfloat16* __restrict__ y, int H, int dv,
                                               int lpg, float eps, Fp8Rows f8) {
  const size_t t = blockIdx.x;
  const int h = threadIdx.x / lpg, gl = threadIdx.x % lpg;
  const bool active = h < H && gl < dv / 8;
  const size_t row = t * H + (active ? h : 0);
  __nv_bfloat16* stage = fp8_stage();
  const Vec8<__nv_bfloat16> r =
      gated_chunk_vec8(o, z, ldz, w, row, t, active ? h : 0, gl, active, dv, lpg, eps);
  if (active) {
    st8(stage + h * dv + 8 * gl, r);
    if (y) st8(y + row * dv + 8 * gl, r);
  }
  __syncthreads();
  quantize_staged_row(stage, H * dv, static_cast<int>(t), f8);
}

bool rms_norm_1p_vec8_shape(int ldx, int ldo, int D) {
  return D % 8 == 0 && ldx % 8 == 0 && ldo % 8 == 0 && D / 8 <= kNormVec * 1024;
}
bool gated_rms_norm_vec8_shape(int ldz, int dv) {
  return dv % 8 == 0 && dv <= 256 && ldz % 8 == 0;
}

}  // namespace

const char* rms_norm_1p_variant(int ldx, int ldo, int D, KernelPath path) {
  return path == KernelPath::Auto && rms_norm_1p_vec8_shape(ldx, ldo, D) ? "rms_norm_1p_vec8"
                                                                         : "rms_norm_1p_generic";
}

const char* gated_rms_norm_variant(int ldz, int dv, KernelPath path) {
  return path == KernelPath::Auto && gated_rms_norm_vec8_shape(ldz, dv) ? "gated_rms_norm_vec8"
                                                                        : "gated_rms_norm_generic";
}

template <typename E>
void rms_norm_1p(const E* x, int ldx, const float* w, E* out, int ldo, int rows, int D, float eps,
                 KernelPath path, cudaStream_t s) {
  if (rows <= 0) return;
  if (path == KernelPath::Auto && rms_norm_1p_vec8_shape(ldx, ldo, D) && aligned16(x) &&
      aligned16(w) && aligned16(out)) {
    const int threads = std::max(32, (D / 8 + kNormVec - 1) / kNormVec + 31) / 32 * 32;
    rms_norm_1p_vec8_kernel<E, false><<<rows, threads, 0, s>>>(x, ldx, w, out, ldo, D, eps, {});
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  const int threads = std::min(1024, std::max(128, (D + kNormRegs - 1) / kNormRegs + 31) / 32 * 32);
  rms_norm_1p_generic_kernel<E, false><<<rows, threads, 0, s>>>(x, ldx, w, out, ldo, D, eps, {});
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void gated_rms_norm(const E* o, const E* z, int ldz, const float* w, E* y, int T, int H, int dv,
                    float eps, KernelPath path, cudaStream_t s) {
  if (T <= 0) return;
  if (dv > 128 * kMaxPerThread) throw std::invalid_argument("gated_rms_norm: head dim above 512");
  if (path == KernelPath::Auto && gated_rms_norm_vec8_shape(ldz, dv) && aligned16(o) &&
      aligned16(z) && aligned16(w) && aligned16(y)) {
    int lpg = 1;
    while (lpg < dv / 8) lpg *= 2;
    const size_t threads = static_cast<size_t>(T) * H * lpg;
    gated_rms_norm_vec8_kernel<E><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, s>>>(
        o, z, ldz, w, y, T, H, dv, lpg, eps);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  gated_rms_norm_generic_kernel<E><<<dim3(T, H), 128, 0, s>>>(o, z, ldz, w, y, H, dv, eps);
  CLEF_CUDA_LAUNCH_CHECK();
}

void rms_norm_1p_fp8(const __nv_bfloat16* x, int ldx, const float* w, __nv_bfloat16* out, int ldo,
                     int rows, int D, float eps, const Fp8Rows& f, KernelPath path,
                     cudaStream_t s) {
  if (rows <= 0) return;
  check_fp8_rows("rms_norm_1p_fp8", D, f, rows);
  const size_t smem = static_cast<size_t>(D) * sizeof(__nv_bfloat16);
  // The same variant and launch shape as rms_norm_1p picks (so the same sums of squares).
  if (path == KernelPath::Auto && rms_norm_1p_vec8_shape(ldx, ldo, D) && aligned16(x) &&
      aligned16(w) && (!out || aligned16(out))) {
    const int threads = std::max(32, (D / 8 + kNormVec - 1) / kNormVec + 31) / 32 * 32;
    rms_norm_1p_vec8_kernel<__nv_bfloat16, true>
        <<<rows, threads, smem, s>>>(x, ldx, w, out, ldo, D, eps, f);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  const int threads = std::min(1024, std::max(128, (D + kNormRegs - 1) / kNormRegs + 31) / 32 * 32);
  rms_norm_1p_generic_kernel<__nv_bfloat16, true>
      <<<rows, threads, smem, s>>>(x, ldx, w, out, ldo, D, eps, f);
  CLEF_CUDA_LAUNCH_CHECK();
}

void gated_rms_norm_fp8(const __nv_bfloat16* o, const __nv_bfloat16* z, int ldz, const float* w,
                        __nv_bfloat16* y, int T, int H, int dv, float eps, const Fp8Rows& f,
                        KernelPath path, cudaStream_t s) {
  if (T <= 0) return;
  if (dv > 128 * kMaxPerThread) throw std::invalid_argument("gated_rms_norm: head dim above 512");
  check_fp8_rows("gated_rms_norm_fp8", H * dv, f, T);
  const size_t smem = static_cast<size_t>(H) * dv * sizeof(__nv_bfloat16);
  int lpg = 1;
  while (lpg < dv / 8) lpg *= 2;
  const int threads = (H * lpg + 31) / 32 * 32;
  if (path == KernelPath::Auto && gated_rms_norm_vec8_shape(ldz, dv) && aligned16(o) &&
      aligned16(z) && aligned16(w) && (!y || aligned16(y)) && threads <= 1024) {
    gated_rms_norm_fp8_vec8_kernel<<<T, threads, smem, s>>>(o, z, ldz, w, y, H, dv, lpg, eps, f);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  gated_rms_norm_fp8_generic_kernel<<<T, 128, smem, s>>>(o, z, ldz, w, y, H, dv, eps, f);
  CLEF_CUDA_LAUNCH_CHECK();
}

#define CLEF_INSTANTIATE(E)                                                                        \
  template void rms_norm_1p<E>(const E*, int, const float*, E*, int, int, int, float, KernelPath,  \
                               cudaStream_t);                                                      \
  template void gated_rms_norm<E>(const E*, const E*, int, const float*, E*, int, int, int, float, \
                                  KernelPath, cudaStream_t);
CLEF_INSTANTIATE(float)
CLEF_INSTANTIATE(__nv_bfloat16)
#undef CLEF_INSTANTIATE

}  // namespace clef::engine::cuda

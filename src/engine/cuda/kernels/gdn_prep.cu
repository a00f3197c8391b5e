// GDN input preparation (see gdn_prep.h); generic and vec8 variants as in kernels/common.cuh, each
// templated on the output form (fp32 normalised q, k or the bf16 form with per-head factors).
#include "engine/cuda/kernels/gdn_prep.h"

#include <algorithm>
#include <stdexcept>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/common.cuh"

namespace clef::engine::cuda {
namespace {

constexpr int kConvK = 4;          // conv taps handled by the vector GDN prep (Qwen3.5: 4)
constexpr int kPrepThreads = 128;  // vector GDN prep: 8 channels per thread, 1024 per block

// The two output forms of the q, k, v values y = conv + SiLU (already rounded to E), one kernel
// per form and variant. Fp32Out: q = y inv / sqrt(dk), k = y inv (inv = 1 / sqrt(sum y^2 +
// 1e-6) of the head), v = y. Bf16xOut (gdn_prep.h GdnPrepBf16Out): y itself in bf16 (exact: y is
// bf16 already) and the per-head factors rq = inv / sqrt(dk), rk = inv.
struct Fp32Out {
  float* q;
  float* k;
  float* v;
  float* g;
  float* beta;
};
using Bf16xOut = GdnPrepBf16Out;

// v: element `off` of [T, Hv, dv]; vec8: 8 of them from `off` (16-byte aligned).
__device__ __forceinline__ void put_v(const Fp32Out& o, size_t off, float y) {
  o.v[off] = y;
}
__device__ __forceinline__ void put_v(const Bf16xOut& o, size_t off, float y) {
  o.xv[off] = from_f<__nv_bfloat16>(y);
}
__device__ __forceinline__ void put_v8(const Fp32Out& o, size_t off, const float (&y)[8]) {
  st8(o.v + off, pack8<float>(y));
}
__device__ __forceinline__ void put_v8(const Bf16xOut& o, size_t off, const float (&y)[8]) {
  st8(o.xv + off, pack8<__nv_bfloat16>(y));
}
// q (kind 0) or k (kind 1): element `off` of [T, Hk, dk] with its head's inv and 1 / sqrt(dk).
__device__ __forceinline__ void put_qk(const Fp32Out& o, int kind, size_t off, float y, float inv,
                                       float scale) {
  if (kind == 0)
    o.q[off] = (y * inv) * scale;
  else
    o.k[off] = y * inv;
}
__device__ __forceinline__ void put_qk(const Bf16xOut& o, int kind, size_t off, float y, float,
                                       float) {
  (kind == 0 ? o.xq : o.xk)[off] = from_f<__nv_bfloat16>(y);
}
__device__ __forceinline__ void put_qk8(const Fp32Out& o, int kind, size_t off, const float (&y)[8],
                                        float inv, float scale) {
  float n[8];
#pragma unroll
  for (int m = 0; m < 8; ++m) n[m] = kind == 0 ? (y[m] * inv) * scale : y[m] * inv;
  st8((kind == 0 ? o.q : o.k) + off, pack8<float>(n));
}
__device__ __forceinline__ void put_qk8(const Bf16xOut& o, int kind, size_t off,
                                        const float (&y)[8], float, float) {
  st8((kind == 0 ? o.xq : o.xk) + off, pack8<__nv_bfloat16>(y));
}
// The factor of q or k head `row` = t * Hk + head (one thread per head); none in the fp32 form.
__device__ __forceinline__ void put_factor(const Fp32Out&, int, size_t, float, float) {}
__device__ __forceinline__ void put_factor(const Bf16xOut& o, int kind, size_t row, float inv,
                                           float scale) {
  if (kind == 0)
    o.rq[row] = inv * scale;
  else
    o.rk[row] = inv;
}

// grid (T, 2*Hk + Hv): one block per token and head of q, k or v.
template <typename E, typename Out>
__global__ void gdn_conv_prep_generic_kernel(const E* __restrict__ proj,
                                             const E* __restrict__ conv_w,
                                             const float* __restrict__ A_log,
                                             const float* __restrict__ dt_bias, GdnPrepArgs a,
                                             Out out) {
  __shared__ float scratch[32];
  const int t = blockIdx.x, hy = blockIdx.y;
  int kind, head, hdim, base;  // kind: 0 q, 1 k, 2 v
  if (hy < a.Hk) {
    kind = 0, head = hy, hdim = a.dk, base = hy * a.dk;
  } else if (hy < 2 * a.Hk) {
    kind = 1, head = hy - a.Hk, hdim = a.dk, base = a.Hk * a.dk + head * a.dk;
  } else {
    kind = 2, head = hy - 2 * a.Hk, hdim = a.dv, base = 2 * a.Hk * a.dk + head * a.dv;
  }
  float val[kMaxPerThread];
  float ss = 0.0f;
#pragma unroll
  for (int r = 0; r < kMaxPerThread; ++r) {
    const int i = threadIdx.x + r * blockDim.x;
    val[r] = 0.0f;
    if (i < hdim) {
      const int ch = base + i;
      float acc = 0.0f;
      const int p = a.positions ? a.positions[t] : t;  // taps reach back at most p rows
      for (int j = 0; j < a.K; ++j) {
        const int tt = t - (a.K - 1) + j;
        if (a.K - 1 - j <= p)
          acc += to_f(conv_w[static_cast<size_t>(ch) * a.K + j]) *
                 to_f(proj[static_cast<size_t>(tt) * a.ld + ch]);
      }
      const float y = rnd<E>(silu_f(rnd<E>(acc)));
      val[r] = y;
      ss += y * y;
    }
  }
  if (kind == 2) {
#pragma unroll
    for (int r = 0; r < kMaxPerThread; ++r) {
      const int i = threadIdx.x + r * blockDim.x;
      if (i < hdim) put_v(out, (static_cast<size_t>(t) * a.Hv + head) * a.dv + i, val[r]);
    }
    if (threadIdx.x == 0) {
      const size_t row = static_cast<size_t>(t) * a.ld;
      const float b = to_f(proj[row + a.b_offset + head]);
      const float av = to_f(proj[row + a.a_offset + head]);
      out.beta[static_cast<size_t>(t) * a.Hv + head] = rnd<E>(sigmoid_f(b));
      out.g[static_cast<size_t>(t) * a.Hv + head] =
          -expf(A_log[head]) * softplus_f(av + dt_bias[head]);
    }
    return;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) + 1e-6f);
  const float scale = rsqrtf(static_cast<float>(a.dk));
  const size_t row = static_cast<size_t>(t) * a.Hk + head;
  if (threadIdx.x == 0) put_factor(out, kind, row, inv, scale);
#pragma unroll
  for (int r = 0; r < kMaxPerThread; ++r) {
    const int i = threadIdx.x + r * blockDim.x;
    if (i < hdim) put_qk(out, kind, row * a.dk + i, val[r], inv, scale);
  }
}

// grid (ceil(T / tpb), ceil(C / 8 / kPrepThreads)), C = 2*Hk*dk + Hv*dv conv channels. Thread =
// 8 consecutive channels (one 16-byte chunk of a proj row) for the block's tpb consecutive tokens:
// the K-row causal window slides in registers (each proj element is loaded once per block, plus
// K-1 halo rows), the next rows are prefetched. A q/k head is held by an aligned group of lpg =
// dk/8 lanes (a power of two), its L2 norm summed by shuffles. Blocks with blockIdx.y == 0 also
// write g and beta of their tokens.
template <typename E, typename Out>
__global__ void __launch_bounds__(kPrepThreads)
    gdn_conv_prep_vec8_kernel(const E* __restrict__ proj, const E* __restrict__ conv_w,
                              const float* __restrict__ A_log, const float* __restrict__ dt_bias,
                              GdnPrepArgs a, int tpb, int lpg, Out out) {
  const int Cq = a.Hk * a.dk, Cv = a.Hv * a.dv, nc = (2 * Cq + Cv) / 8;
  const int t0 = blockIdx.x * tpb, t1 = min(t0 + tpb, a.T);
  if (blockIdx.y == 0) {
    for (int e = threadIdx.x; e < (t1 - t0) * a.Hv; e += blockDim.x) {
      const int t = t0 + e / a.Hv, head = e % a.Hv;
      const size_t row = static_cast<size_t>(t) * a.ld;
      const float b = to_f(proj[row + a.b_offset + head]);
      const float av = to_f(proj[row + a.a_offset + head]);
      out.beta[static_cast<size_t>(t) * a.Hv + head] = rnd<E>(sigmoid_f(b));
      out.g[static_cast<size_t>(t) * a.Hv + head] =
          -expf(A_log[head]) * softplus_f(av + dt_bias[head]);
    }
  }
  const int c = blockIdx.y * kPrepThreads + threadIdx.x;  // chunk: channels [8c, 8c + 8)
  const bool active = c < nc;
  const int ch = 8 * c;
  const int kind = ch < Cq ? 0 : (ch < 2 * Cq ? 1 : 2);  // q, k, v (a chunk never straddles)
  // Taps: conv_w[(ch + m) * K + j] = element m * K + j of the 32 contiguous values at ch * K.
  float cw[8][kConvK];
  {
    float f[4][8];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      unpack8(active ? ld8(conv_w + static_cast<size_t>(ch) * kConvK + 8 * i) : Vec8<E>{}, f[i]);
#pragma unroll
    for (int m = 0; m < 8; ++m)
#pragma unroll
      for (int j = 0; j < kConvK; ++j) cw[m][j] = f[(m * kConvK + j) / 8][(m * kConvK + j) % 8];
  }
  const E* col = proj + ch;
  auto load_row = [&](int t) {  // zeros outside [0, t1): never used (history) or never loaded
    return active && t >= 0 && t < t1 ? ld8(col + static_cast<size_t>(t) * a.ld) : Vec8<E>{};
  };
  // r0..r3 = rows t-3..t, r4, r5 = t+1, t+2 (in flight)
  Vec8<E> r0 = load_row(t0 - 3), r1 = load_row(t0 - 2), r2 = load_row(t0 - 1), r3 = load_row(t0),
          r4 = load_row(t0 + 1), r5 = load_row(t0 + 2);
  const float scale = rsqrtf(static_cast<float>(a.dk));
  for (int t = t0; t < t1; ++t) {
    const Vec8<E> r6 = load_row(t + 3);
    float x[kConvK][8];
    unpack8(r0, x[0]);
    unpack8(r1, x[1]);
    unpack8(r2, x[2]);
    unpack8(r3, x[3]);
    float y[8];
    float ss = 0.0f;
    const int p = a.positions ? a.positions[t] : t;  // taps reach back at most p rows
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kConvK; ++j)
        if (kConvK - 1 - j <= p) acc += cw[m][j] * x[j][m];
      y[m] = rnd<E>(silu_f(rnd<E>(acc)));
      ss += y[m] * y[m];
    }
    ss = group_sum(ss, lpg);  // every lane (v and inactive ones too): the shuffles need them all
    if (active) {
      if (kind == 2) {
        put_v8(out, static_cast<size_t>(t) * Cv + (ch - 2 * Cq), y);
      } else {
        const float inv = rsqrtf(ss + 1e-6f);
        const int cq = ch - kind * Cq;  // channel within q or k
        put_qk8(out, kind, static_cast<size_t>(t) * Cq + cq, y, inv, scale);
        if (cq % a.dk == 0)  // the head's first lane
          put_factor(out, kind, static_cast<size_t>(t) * a.Hk + cq / a.dk, inv, scale);
      }
    }
    r0 = r1, r1 = r2, r2 = r3, r3 = r4, r4 = r5, r5 = r6;
  }
}

bool gdn_conv_prep_vec8_shape(const GdnPrepArgs& a) {
  const int lpg = a.dk / 8;  // lanes per q/k head in the vec8 variant
  return a.K == kConvK && a.dk % 8 == 0 && lpg <= 32 && (lpg & (lpg - 1)) == 0 &&
         (a.Hv * a.dv) % 8 == 0 && a.ld % 8 == 0;
}

bool aligned16(const Fp32Out& o) {
  return aligned16(o.q) && aligned16(o.k) && aligned16(o.v);
}
bool aligned16(const Bf16xOut& o) {
  return aligned16(o.xq) && aligned16(o.xk) && aligned16(o.xv);
}

// Whether the vec8 variant runs (the factors and g, beta are stored one by one: any alignment).
template <typename E, typename Out>
bool takes_vec8(const E* proj, const E* conv_w, const GdnPrepArgs& a, const Out& out,
                KernelPath path) {
  return path == KernelPath::Auto && gdn_conv_prep_vec8_shape(a) && aligned16(proj) &&
         aligned16(conv_w) && aligned16(out);
}

template <typename E, typename Out>
void launch_prep(const E* proj, const E* conv_w, const float* A_log, const float* dt_bias,
                 const GdnPrepArgs& a, const Out& out, KernelPath path, cudaStream_t s) {
  if (a.T <= 0) return;
  if (a.dk > 128 * kMaxPerThread || a.dv > 128 * kMaxPerThread)
    throw std::invalid_argument("gdn_conv_prep: head dim above 512");
  if (takes_vec8(proj, conv_w, a, out, path)) {
    const int lpg = a.dk / 8;  // lanes per q/k head
    const int nc = (2 * a.Hk * a.dk + a.Hv * a.dv) / 8;
    const int gy = (nc + kPrepThreads - 1) / kPrepThreads;
    // Tokens per block: up to 16 (halo re-reads 3/16, mostly L2 hits), fewer when T is short so
    // that about 2048 blocks still fill the GPU.
    const long long want = (static_cast<long long>(a.T) * gy + 2047) / 2048;
    const int tpb = static_cast<int>(std::min<long long>(16, std::max<long long>(4, want)));
    gdn_conv_prep_vec8_kernel<E, Out><<<dim3((a.T + tpb - 1) / tpb, gy), kPrepThreads, 0, s>>>(
        proj, conv_w, A_log, dt_bias, a, tpb, lpg, out);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  dim3 grid(a.T, 2 * a.Hk + a.Hv);
  gdn_conv_prep_generic_kernel<E, Out><<<grid, 128, 0, s>>>(proj, conv_w, A_log, dt_bias, a, out);
  CLEF_CUDA_LAUNCH_CHECK();
}

}  // namespace

const char* gdn_conv_prep_variant(const GdnPrepArgs& a, KernelPath path) {
  return path == KernelPath::Auto && gdn_conv_prep_vec8_shape(a) ? "gdn_conv_prep_vec8"
                                                                 : "gdn_conv_prep_generic";
}

const char* gdn_conv_prep_bf16x_variant(const GdnPrepArgs& a, KernelPath path) {
  return path == KernelPath::Auto && gdn_conv_prep_vec8_shape(a) ? "gdn_conv_prep_bf16x_vec8"
                                                                 : "gdn_conv_prep_bf16x_generic";
}

template <typename E>
void gdn_conv_prep(const E* proj, const E* conv_w, const float* A_log, const float* dt_bias,
                   const GdnPrepArgs& a, float* q, float* k, float* v, float* g, float* beta,
                   KernelPath path, cudaStream_t s) {
  launch_prep(proj, conv_w, A_log, dt_bias, a, Fp32Out{q, k, v, g, beta}, path, s);
}

void gdn_conv_prep_bf16x(const __nv_bfloat16* proj, const __nv_bfloat16* conv_w, const float* A_log,
                         const float* dt_bias, const GdnPrepArgs& a, const GdnPrepBf16Out& out,
                         KernelPath path, cudaStream_t s) {
  launch_prep(proj, conv_w, A_log, dt_bias, a, out, path, s);
}

#define CLEF_INSTANTIATE(E)                                                                  \
  template void gdn_conv_prep<E>(const E*, const E*, const float*, const float*,             \
                                 const GdnPrepArgs&, float*, float*, float*, float*, float*, \
                                 KernelPath, cudaStream_t);
CLEF_INSTANTIATE(float)
CLEF_INSTANTIATE(__nv_bfloat16)
#undef CLEF_INSTANTIATE

}  // namespace clef::engine::cuda

// Attention input preparation and output gate (see attn_prep.h); generic and vec8 variants as in
// kernels/common.cuh.
#include "engine/cuda/kernels/attn_prep.h"

#include <cmath>

#include <stdexcept>
#include <string>

#include "engine/cuda/attention/kv_tiles.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/common.cuh"
#include "engine/cuda/kernels/fp8_rows.cuh"

namespace clef::engine::cuda {
namespace {

// Where head item hy of token t lives. Items are ordered [q heads | k heads | v heads]; a proj
// row holds the q heads (each followed by its output gate, 2*hd per head), then k, then v.
// Offsets rather than pointers, so the kernels keep their __restrict__ (read-only) loads.
struct AttnPrepHead {
  enum Kind { Q, K, V } kind;
  size_t src;  // into proj
  size_t dst;  // into q, k or v: element 0 of the head's row (key tiles: column c at kv_dst(c))
  int head;    // within its kind
};
__device__ __forceinline__ AttnPrepHead attn_prep_head(const AttnPrepArgs& a, int t, int hy) {
  const size_t row = static_cast<size_t>(t) * a.ld;
  if (hy < a.nh)
    return {AttnPrepHead::Q, row + hy * 2 * a.hd, (static_cast<size_t>(t) * a.nh + hy) * a.hd, hy};
  const int h = hy < a.nh + a.nkv ? hy - a.nh : hy - a.nh - a.nkv;
  const size_t dst = (static_cast<size_t>(t) * a.nkv + h) * a.hd;
  if (hy < a.nh + a.nkv) return {AttnPrepHead::K, row + a.nh * 2 * a.hd + h * a.hd, dst, h};
  return {AttnPrepHead::V, row + a.nh * 2 * a.hd + a.nkv * a.hd + h * a.hd, dst, h};
}

// Where column c of row t's K or V head goes: its row (at.dst + c) or, with kv_tiled, its key
// tile (kv_tiles.h; hd a multiple of 16, so the tiles have no padding columns).
__device__ __forceinline__ size_t kv_dst(const AttnPrepArgs& a, const AttnPrepHead& at, int t,
                                         int c) {
  if (!a.kv_tiled) return at.dst + c;
  if (a.kv_rows) return kv_tiled_at(a.kv_rows[t], at.head, c, a.kv_head_blocks, a.hd);
  return kv_tiled_index(t, at.head, c, a.T, a.hd);
}
// Rows launched: T, or with global key tiles every row of the last 64-row key tile (those past T
// hold zeros in K and V).
__host__ __device__ __forceinline__ int launched_rows(const AttnPrepArgs& a) {
  return a.kv_tiled && !a.kv_rows ? kv_tile_blocks(a.T) * kKvTileRows : a.T;
}

// Row t's rotary position for frequency fi: the multimodal axis of fi when 3-D positions are
// given, else the 1-D position.
__device__ __forceinline__ int rope_position(const AttnPrepArgs& a, int t, int fi) {
  if (a.mrope_positions) {
    const int axis = fi % 3 == 1 && fi < 3 * a.mrope_section[1]   ? 1
                     : fi % 3 == 2 && fi < 3 * a.mrope_section[2] ? 2
                                                                  : 0;
    return a.mrope_positions[static_cast<size_t>(axis) * a.T + t];
  }
  return a.positions ? a.positions[t] : t;
}

// A row's rotary factors as both variants use them: (rnd<E>(cos), rnd<E>(sin)) of frequency fi.
template <typename E>
__device__ __forceinline__ float2 rope_cos_sin(const AttnPrepArgs& a, int t, int fi) {
  const float ang = static_cast<float>(rope_position(a, t, fi)) * a.inv_freq[fi];
  return make_float2(rnd<E>(cosf(ang)), rnd<E>(sinf(ang)));
}

// grid (T, nh + 2*nkv)
template <typename E>
__global__ void attn_prep_generic_kernel(const E* __restrict__ proj, const float* __restrict__ qw,
                                         const float* __restrict__ kw, AttnPrepArgs a,
                                         E* __restrict__ q, E* __restrict__ k, E* __restrict__ v) {
  extern __shared__ float sm[];  // hd normalised values
  __shared__ float scratch[32];
  const int t = blockIdx.x;
  const AttnPrepHead at = attn_prep_head(a, t, blockIdx.y);
  const bool is_q = at.kind == AttnPrepHead::Q;
  if (t >= a.T) {  // a key tile's rows past T (kv_tiled)
    if (!is_q)
      for (int i = threadIdx.x; i < a.hd; i += blockDim.x)
        (at.kind == AttnPrepHead::V ? v : k)[kv_dst(a, at, t, i)] = from_f<E>(0.0f);
    return;
  }
  const E* src = proj + at.src;
  if (at.kind == AttnPrepHead::V) {  // plain copy
    for (int i = threadIdx.x; i < a.hd; i += blockDim.x) v[kv_dst(a, at, t, i)] = src[i];
    return;
  }
  const float* w = is_q ? qw : kw;
  // q's row, or k's (row or key tile) through dst_at.
  E* const out = is_q ? q : k;
  auto dst_at = [&](int i) { return is_q ? at.dst + i : kv_dst(a, at, t, i); };
  float ss = 0.0f;
  for (int i = threadIdx.x; i < a.hd; i += blockDim.x) {
    const float x = to_f(src[i]);
    ss += x * x;
  }
  const float rs = rsqrtf(block_sum(ss, scratch) / static_cast<float>(a.hd) + a.eps);
  for (int i = threadIdx.x; i < a.hd; i += blockDim.x)
    sm[i] = rnd<E>((to_f(src[i]) * rs) * (1.0f + w[i]));
  __syncthreads();
  const int half = a.rd / 2;
  for (int i = threadIdx.x; i < a.hd; i += blockDim.x) {
    if (i >= a.rd) {
      out[dst_at(i)] = from_f<E>(sm[i]);
      continue;
    }
    const float2 c = rope_cos_sin<E>(a, t, i < half ? i : i - half);
    const float rh = i < half ? -sm[i + half] : sm[i - half];
    out[dst_at(i)] = from_f<E>(rnd<E>(sm[i] * c.x) + rnd<E>(rh * c.y));
  }
}

template <typename E>
__global__ void attn_output_gate_generic_kernel(E* __restrict__ attn, const E* __restrict__ proj,
                                                int ld, int nh, int hd) {
  const size_t t = blockIdx.x;
  const int e0 = blockIdx.y * kSlice + threadIdx.x;
#pragma unroll
  for (int r = 0; r < kSlice / kSliceThreads; ++r) {
    const int e = e0 + r * kSliceThreads;
    if (e >= nh * hd) break;
    const int h = e / hd, i = e % hd;
    const float gate = rnd<E>(sigmoid_rounded_to<E>(to_f(proj[t * ld + h * 2 * hd + hd + i])));
    attn[t * nh * hd + e] = from_f<E>(to_f(attn[t * nh * hd + e]) * gate);
  }
}

// One warp per (token, head) item, items ordered (t, [q heads | k heads | v heads]); lane l holds
// elements [8l, 8l + 8) of the head (hd <= 256). Rotate-half partner chunks (rd/2 a multiple of 8)
// come from lane l +- rd/16 by shuffles. The block's rows' cos/sin are computed once, into shared
// memory, for all of a row's heads: computed per element, the 16 accurate sinf/cosf of a RoPE
// lane (8 of 32 lanes busy) were most of the kernel's issue time (H200, 5661 tokens: 101 us, 29 %
// of HBM bandwidth).
constexpr int kPrepVecWarps = 8;  // items per block
// Rows a block's items span at most: nh + 2 nkv >= 3 items per row, so 8 items touch <= 4 rows.
constexpr int kPrepVecRows = 4;
template <typename E>
__global__ void __launch_bounds__(32 * kPrepVecWarps)
    attn_prep_vec8_kernel(const E* __restrict__ proj, const float* __restrict__ qw,
                          const float* __restrict__ kw, AttnPrepArgs a, E* __restrict__ q,
                          E* __restrict__ k, E* __restrict__ v) {
  __shared__ float2 cs_rows[kPrepVecRows][128];  // [row - the block's first][fi], rd/2 <= 128
  const int lane = threadIdx.x & 31;
  const int nhy = a.nh + 2 * a.nkv;
  const size_t item0 = static_cast<size_t>(blockIdx.x) * kPrepVecWarps;
  const size_t item = item0 + (threadIdx.x >> 5);
  const int half = a.rd / 2;
  const int row0 = static_cast<int>(item0 / nhy);
  for (int e = threadIdx.x; e < kPrepVecRows * half; e += blockDim.x) {
    const int t = row0 + e / half;
    if (t < a.T) cs_rows[e / half][e % half] = rope_cos_sin<E>(a, t, e % half);
  }
  __syncthreads();
  if (item >= static_cast<size_t>(launched_rows(a)) * nhy) return;  // warp-uniform
  const int t = static_cast<int>(item / nhy), hy = static_cast<int>(item % nhy);
  const float2* cs = cs_rows[t - row0];
  const bool act = lane < a.hd / 8;
  const int i0 = 8 * lane;
  const AttnPrepHead at = attn_prep_head(a, t, hy);
  const bool is_q = at.kind == AttnPrepHead::Q;
  if (t >= a.T) {  // a key tile's rows past T (kv_tiled)
    if (!is_q && act) st8((at.kind == AttnPrepHead::V ? v : k) + kv_dst(a, at, t, i0), Vec8<E>{});
    return;
  }
  const E* src = proj + at.src;
  if (at.kind == AttnPrepHead::V) {  // plain copy
    if (act) st8(v + kv_dst(a, at, t, i0), ld8(src + i0));
    return;
  }
  const float* w = is_q ? qw : kw;
  E* dst = is_q ? q + at.dst + i0 : k + kv_dst(a, at, t, i0);
  float x[8];
  unpack8(act ? ld8(src + i0) : Vec8<E>{}, x);
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) ss += x[j] * x[j];
  const float rs = rsqrtf(warp_sum(ss) / static_cast<float>(a.hd) + a.eps);
  float n[8];
  if (act) {
    float wv[8];
    load8f(w + i0, wv);
#pragma unroll
    for (int j = 0; j < 8; ++j) n[j] = rnd<E>((x[j] * rs) * (1.0f + wv[j]));
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) n[j] = 0.0f;
  }
  const int src_lane = i0 < half ? lane + half / 8 : (i0 < a.rd ? lane - half / 8 : lane);
  float p[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) p[j] = __shfl_sync(0xffffffffu, n[j], src_lane);
  if (!act) return;
  float res[8];
  if (i0 >= a.rd) {
#pragma unroll
    for (int j = 0; j < 8; ++j) res[j] = n[j];
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = i0 + j;
      const float2 c = cs[i < half ? i : i - half];
      const float rh = i < half ? -p[j] : p[j];
      res[j] = rnd<E>(n[j] * c.x) + rnd<E>(rh * c.y);
    }
  }
  st8(dst, pack8<E>(res));
}

// grid (T, ceil(nh * hd / 8 / kVecChunks)); hd a multiple of 8, so a chunk lies in one head.
template <typename E>
__global__ void attn_output_gate_vec8_kernel(E* __restrict__ attn, const E* __restrict__ proj,
                                             int ld, int nh, int hd) {
  const size_t t = blockIdx.x;
  const int hc = hd / 8;
  E* arow = attn + t * nh * hd;
  const E* prow = proj + t * ld;
  pairwise_chunks<E>(
      blockIdx.y * kVecChunks + threadIdx.x, nh * hc, [&](int c) { return arow + 8 * c; },
      [&](int c) { return prow + (c / hc) * 2 * hd + hd + 8 * (c % hc); },
      [&](int c) { return arow + 8 * c; },
      [](float x, float gt) { return x * rnd<E>(sigmoid_rounded_to<E>(gt)); });
}

// The gated attention output (t, e), e = h * hd + i, exactly as both attn_output_gate variants
// compute it.
struct GatedAttnValue {
  const __nv_bfloat16* attn;
  const __nv_bfloat16* proj;
  int ld, nh, hd;
  __device__ __nv_bfloat16 operator()(int t, int e) const {
    const int h = e / hd, i = e % hd;
    const size_t tt = static_cast<size_t>(t);
    const float gate = rnd<__nv_bfloat16>(
        sigmoid_rounded_to<__nv_bfloat16>(to_f(proj[tt * ld + h * 2 * hd + hd + i])));
    return from_f<__nv_bfloat16>(to_f(attn[tt * nh * hd + e]) * gate);
  }
};

bool attn_prep_vec8_shape(const AttnPrepArgs& a) {
  return a.hd % 8 == 0 && a.hd <= 256 && a.rd % 16 == 0 && a.rd <= a.hd && a.ld % 8 == 0;
}
bool attn_output_gate_vec8_shape(int ld, int hd) {
  return hd % 8 == 0 && ld % 8 == 0;
}

}  // namespace

const char* attn_prep_variant(const AttnPrepArgs& a, KernelPath path) {
  const bool vec8 = path == KernelPath::Auto && attn_prep_vec8_shape(a);
  if (a.kv_tiled) return vec8 ? "attn_prep_vec8_kv_tiles" : "attn_prep_generic_kv_tiles";
  return vec8 ? "attn_prep_vec8" : "attn_prep_generic";
}

const char* attn_output_gate_variant(int ld, int hd, KernelPath path) {
  return path == KernelPath::Auto && attn_output_gate_vec8_shape(ld, hd)
             ? "attn_output_gate_vec8"
             : "attn_output_gate_generic";
}

template <typename E>
void attn_prep(const E* proj, const float* q_norm_w, const float* k_norm_w, const AttnPrepArgs& a,
               E* q, E* k, E* v, KernelPath path, cudaStream_t s) {
  if (a.T <= 0) return;
  if (a.kv_tiled && a.hd % 16 != 0)
    throw std::invalid_argument(
        "attn_prep: key tiles need a head dim that is a multiple of 16, not " +
        std::to_string(a.hd));
  if ((a.kv_rows != nullptr) != (a.kv_head_blocks > 0) || (a.kv_rows && !a.kv_tiled))
    throw std::invalid_argument(
        "attn_prep: per-sequence key tiles need kv_rows, kv_head_blocks "
        "and kv_tiled together");
  if (path == KernelPath::Auto && attn_prep_vec8_shape(a) && aligned16(proj) &&
      aligned16(q_norm_w) && aligned16(k_norm_w) && aligned16(q) && aligned16(k) && aligned16(v)) {
    const size_t warps = static_cast<size_t>(launched_rows(a)) * (a.nh + 2 * a.nkv);
    attn_prep_vec8_kernel<E><<<static_cast<unsigned>((warps + kPrepVecWarps - 1) / kPrepVecWarps),
                               32 * kPrepVecWarps, 0, s>>>(proj, q_norm_w, k_norm_w, a, q, k, v);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  dim3 grid(launched_rows(a), a.nh + 2 * a.nkv);
  attn_prep_generic_kernel<E>
      <<<grid, 128, a.hd * sizeof(float), s>>>(proj, q_norm_w, k_norm_w, a, q, k, v);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <typename E>
void attn_output_gate(E* attn, const E* proj, int ld, int T, int nh, int hd, KernelPath path,
                      cudaStream_t s) {
  if (T <= 0) return;
  if (path == KernelPath::Auto && attn_output_gate_vec8_shape(ld, hd) && aligned16(attn) &&
      aligned16(proj)) {
    const int nc = nh * hd / 8;
    attn_output_gate_vec8_kernel<E>
        <<<dim3(T, (nc + kVecChunks - 1) / kVecChunks), kVecThreads, 0, s>>>(attn, proj, ld, nh,
                                                                             hd);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  attn_output_gate_generic_kernel<E>
      <<<dim3(T, (nh * hd + kSlice - 1) / kSlice), kSliceThreads, 0, s>>>(attn, proj, ld, nh, hd);
  CLEF_CUDA_LAUNCH_CHECK();
}

void attn_output_gate_fp8(__nv_bfloat16* attn, const __nv_bfloat16* proj, int ld, int T, int nh,
                          int hd, bool store, const Fp8Rows& f, cudaStream_t s) {
  if (T <= 0) return;
  check_fp8_rows("attn_output_gate_fp8", nh * hd, f, T);
  fp8_elementwise_rows_kernel<<<T, 512, static_cast<size_t>(nh) * hd * sizeof(__nv_bfloat16), s>>>(
      nh * hd, GatedAttnValue{attn, proj, ld, nh, hd}, store ? attn : nullptr, nh * hd, f);
  CLEF_CUDA_LAUNCH_CHECK();
}

std::vector<float> rope_inv_freq(int rd, double theta) {
  std::vector<float> f(rd / 2);
  for (int i = 0; i < rd / 2; ++i)
    f[i] = 1.0f /
           std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(rd));
  return f;
}

#define CLEF_INSTANTIATE(E)                                                                     \
  template void attn_prep<E>(const E*, const float*, const float*, const AttnPrepArgs&, E*, E*, \
                             E*, KernelPath, cudaStream_t);                                     \
  template void attn_output_gate<E>(E*, const E*, int, int, int, int, KernelPath, cudaStream_t);
CLEF_INSTANTIATE(float)
CLEF_INSTANTIATE(__nv_bfloat16)
#undef CLEF_INSTANTIATE

}  // namespace clef::engine::cuda

// GDN input preparation (see gdn_prep.h); generic and tile variants (the tile one is this family's
// vector variant of kernels/common.cuh, its loads staged through shared memory), each templated on
// the output form (fp32 normalised q, k or the bf16 form with per-head factors).
#include "engine/cuda/kernels/gdn_prep.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/common.cuh"
#include "engine/cuda/mma_sync.cuh"

namespace clef::engine::cuda {
namespace {

constexpr int kConvK = 4;  // conv taps handled by the vector GDN prep (Qwen3.5: 4)

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

// v: element `off` of [T, Hv, dv].
__device__ __forceinline__ void put_v(const Fp32Out& o, size_t off, float y) {
  o.v[off] = y;
}
__device__ __forceinline__ void put_v(const Bf16xOut& o, size_t off, float y) {
  o.xv[off] = from_f<__nv_bfloat16>(y);
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
// The factor of q or k head `row` = t * Hk + head (one thread per head); none in the fp32 form.
__device__ __forceinline__ void put_factor(const Fp32Out&, int, size_t, float, float) {}
__device__ __forceinline__ void put_factor(const Bf16xOut& o, int kind, size_t row, float inv,
                                           float scale) {
  if (kind == 0)
    o.rq[row] = inv * scale;
  else
    o.rk[row] = inv;
}

// beta = sigmoid(b) (rounded to E) and g = -e^A_log softplus(a + dt_bias) of token t, value head
// `head` (both variants).
template <typename E, typename Out>
__device__ __forceinline__ void put_g_beta(const E* __restrict__ proj,
                                           const float* __restrict__ A_log,
                                           const float* __restrict__ dt_bias, const GdnPrepArgs& a,
                                           int t, int head, const Out& out) {
  const size_t row = static_cast<size_t>(t) * a.ld;
  const float b = to_f(proj[row + a.b_offset + head]);
  const float av = to_f(proj[row + a.a_offset + head]);
  out.beta[static_cast<size_t>(t) * a.Hv + head] = rnd<E>(sigmoid_f(b));
  out.g[static_cast<size_t>(t) * a.Hv + head] = -expf(A_log[head]) * softplus_f(av + dt_bias[head]);
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
      const float y = rnd<E>(silu_rounded_to<E>(rnd<E>(acc)));
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
    if (threadIdx.x == 0) put_g_beta(proj, A_log, dt_bias, a, t, head, out);
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

// ---- tile variant ------------------------------------------------------------------------------
// grid (ceil(T / n), ceil(nc / kTileThreads)), nc = C / 8 chunks of 8 conv channels (C = 2*Hk*dk +
// Hv*dv). A thread owns one chunk for the block's n tokens (n a multiple of kTileGroup). Why a
// tile: the register-window kernel this replaced kept ~3 16-byte loads per thread in flight in a
// serial chain and was latency-bound (25-35 % of HBM). Here every proj row a thread needs, rows
// t0 - 3 .. t0 + n - 1 of its chunk, is requested at once by cp.async into shared memory (no
// registers held by loads in flight: n + 3 16-byte pieces per thread, 38 KiB per bf16 block at n =
// 16), in one commit group per kTileGroup tokens, so the first tokens compute while the later rows
// still arrive. A thread reads back only the pieces it copied itself, so cp.async.wait_group alone
// orders them (no __syncthreads anywhere). Per group of 4 tokens the 7 rows are unpacked once each
// and added tap-major into the 4 tokens' accumulators (token i takes row r as tap r - i: taps still
// added in the order j = 0..3 from +0, the same fp32 operations as the generic kernel); the
// position masks are applied only in a group with a token within K - 1 of its sequence start.
// The q/k head norm is a shuffle sum over the head's lpg = dk / 8 aligned lanes, as before.
constexpr int kTileThreads = 128;  // 8 channels per thread: 1024 channels per block
constexpr int kTileGroup = 4;      // tokens per commit group (4 + K - 1 rows)
constexpr int kTileHalo = kConvK - 1;
// Tokens per block at most: the static shared tile stays under 48 KiB ((16 + 3) x 2 KiB bf16,
// (8 + 3) x 4 KiB fp32), and the wait below handles at most 4 groups.
template <typename E>
constexpr int tile_max_tokens() {
  return sizeof(E) == 2 ? 16 : 8;
}
// Blocks the launch keeps at least (while n can shrink): ~2.5 per SM of an H200's 132, so that
// T = 361 (n = 8) still spreads over every SM.
constexpr long long kTileMinBlocks = 330;

// Waits until at most `pending` (0..3, warp-uniform) of this thread's newest groups are in flight.
__device__ __forceinline__ void cp_async_wait_upto(int pending) {
  if (pending >= 3)
    cp_async_wait<3>();
  else if (pending == 2)
    cp_async_wait<2>();
  else if (pending == 1)
    cp_async_wait<1>();
  else
    cp_async_wait<0>();
}

// The 8 values of a chunk from its 16-byte pieces in shared memory (bf16 one, fp32 two).
__device__ __forceinline__ Vec8<__nv_bfloat16> chunk_of(const uint4 (&pc)[1]) {
  return {pc[0]};
}
__device__ __forceinline__ Vec8<float> chunk_of(const uint4 (&pc)[2]) {
  const auto f4 = [](uint4 u) {
    return make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z),
                       __uint_as_float(u.w));
  };
  return {f4(pc[0]), f4(pc[1])};
}

// v[m] = rnd<E>(v[m]); bf16: two values per conversion (cvt.rn.bf16x2.f32, the same rounding as
// from_f one by one), widened back by a shift or a mask.
template <typename E>
__device__ __forceinline__ void rnd8(float (&v)[8]);
template <>
__device__ __forceinline__ void rnd8<float>(float (&)[8]) {}
template <>
__device__ __forceinline__ void rnd8<__nv_bfloat16>(float (&v)[8]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t w = pack_bf16(v[2 * j], v[2 * j + 1]);
    v[2 * j] = __uint_as_float(w << 16);
    v[2 * j + 1] = __uint_as_float(w & 0xffff0000u);
  }
}
// Tile variant stores: a thread's chunk goes to one tensor, column col, one row per token;
// chunk_dst(o, kind) + col is set up once, then row t is at + t * stride. y: the chunk's 8 values,
// yv: the same values packed in E (the bf16 form stores those bits).
__device__ __forceinline__ float* chunk_dst(const Fp32Out& o, int kind) {
  return kind == 0 ? o.q : (kind == 1 ? o.k : o.v);
}
__device__ __forceinline__ __nv_bfloat16* chunk_dst(const Bf16xOut& o, int kind) {
  return kind == 0 ? o.xq : (kind == 1 ? o.xk : o.xv);
}
// Where a q/k head's factor goes ([T, Hk], + head, row t at + t * Hk): the fp32 form has none.
__device__ __forceinline__ float* factor_dst(const Fp32Out&, int) {
  return nullptr;
}
__device__ __forceinline__ float* factor_dst(const Bf16xOut& o, int kind) {
  return kind == 0 ? o.rq : o.rk;
}
template <typename E>
__device__ __forceinline__ void store_v(float* p, const float (&y)[8], const Vec8<E>&) {
  st8(p, pack8<float>(y));
}
__device__ __forceinline__ void store_v(__nv_bfloat16* p, const float (&)[8],
                                        const Vec8<__nv_bfloat16>& yv) {
  st8(p, yv);
}
// q, k: (y inv) fs with fs = 1 / sqrt(dk) for q and 1 for k (y inv exactly, as put_qk's k), or
// y itself in the bf16 form.
template <typename E>
__device__ __forceinline__ void store_qk(float* p, const float (&y)[8], const Vec8<E>&, float inv,
                                         float fs) {
  float n[8];
#pragma unroll
  for (int m = 0; m < 8; ++m) n[m] = (y[m] * inv) * fs;
  st8(p, pack8<float>(n));
}
__device__ __forceinline__ void store_qk(__nv_bfloat16* p, const float (&)[8],
                                         const Vec8<__nv_bfloat16>& yv, float, float) {
  st8(p, yv);
}

// The conv of one group's kTileGroup tokens from the group's rows s0 .. s0 + kTileGroup + K - 2 of
// this thread's column: acc[i] = sum over taps j = 0..K-1 (in that order, from +0) of
// w[j] x[row s0 + i + j], each row widened once. kMasked: tap j of token i only where K - 1 - j <=
// p[i] (the generic kernel's condition); without it every tap is taken (all p[i] >= K - 1).
template <bool kMasked, typename E, int P>
__device__ __forceinline__ void conv_group(const uint4 (*tile)[P][kTileThreads], int s0, int tid,
                                           const float (&cw)[8][kConvK], const int (&p)[kTileGroup],
                                           float (&acc)[kTileGroup][8]) {
#pragma unroll
  for (int i = 0; i < kTileGroup; ++i)
#pragma unroll
    for (int m = 0; m < 8; ++m) acc[i][m] = 0.0f;
#pragma unroll
  for (int r = 0; r < kTileGroup + kTileHalo; ++r) {
    uint4 pc[P];
#pragma unroll
    for (int q = 0; q < P; ++q) pc[q] = tile[s0 + r][q][tid];
    float x[8];
    unpack8(chunk_of(pc), x);
#pragma unroll
    for (int i = 0; i < kTileGroup; ++i) {
      const int j = r - i;  // row s0 + r is tap j of token i
      if (j < 0 || j >= kConvK) continue;
      if (kMasked && kConvK - 1 - j > p[i]) continue;
#pragma unroll
      for (int m = 0; m < 8; ++m) acc[i][m] += cw[m][j] * x[m];
    }
  }
}

// 5 blocks per SM (at most 102 registers; shared memory allows 5 at n = 16 too).
template <typename E, typename Out>
__global__ void __launch_bounds__(kTileThreads, 5)
    gdn_conv_prep_tile_kernel(const E* __restrict__ proj, const E* __restrict__ conv_w,
                              const float* __restrict__ A_log, const float* __restrict__ dt_bias,
                              GdnPrepArgs a, int n, int lpg, Out out) {
  constexpr int P = sizeof(E) / 2;  // 16-byte pieces per chunk
  // tile[s][q][thread]: piece q of the thread's chunk of proj row t0 - 3 + s; a warp's accesses
  // to one (s, q) are 512 contiguous bytes (no bank conflicts).
  __shared__ uint4 tile[tile_max_tokens<E>() + kTileHalo][P][kTileThreads];
  const int Cq = a.Hk * a.dk, Cv = a.Hv * a.dv, nc = (2 * Cq + Cv) / 8;
  const int tid = threadIdx.x, t0 = blockIdx.x * n, nt = min(n, a.T - t0);
  const int c = blockIdx.y * kTileThreads + tid;  // chunk: channels [8c, 8c + 8)
  const bool active = c < nc;
  const int ch = 8 * c;
  const int ng = (nt + kTileGroup - 1) / kTileGroup;  // groups holding tokens < T
  {
    // Every copy first. Rows outside [0, T) and idle lanes are zero-filled (src-size 0, nothing
    // read): tokens never take such rows (taps stop at the sequence start), but the tile is then
    // never read uninitialised.
    const auto stage = [&](int s) {
      const int t = t0 - kTileHalo + s;
      const bool ok = active && t >= 0 && t < a.T;
      const E* src = ok ? proj + static_cast<size_t>(t) * a.ld + ch : proj;
#pragma unroll
      for (int q = 0; q < P; ++q)
        cp_async16(&tile[s][q][tid], ok ? src + q * 16 / sizeof(E) : src, ok ? 16 : 0);
    };
#pragma unroll
    for (int s = 0; s < kTileGroup + kTileHalo; ++s) stage(s);
    cp_async_commit();
    for (int gi = 1; gi < ng; ++gi) {
#pragma unroll
      for (int s = 0; s < kTileGroup; ++s) stage(kTileHalo + gi * kTileGroup + s);
      cp_async_commit();
    }
  }
  // g and beta of the block's tokens while the rows arrive, spread over the channel blocks.
  for (int e = blockIdx.y * kTileThreads + tid; e < nt * a.Hv; e += gridDim.y * kTileThreads)
    put_g_beta(proj, A_log, dt_bias, a, t0 + e / a.Hv, e % a.Hv, out);
  const int kind = ch < Cq ? 0 : (ch < 2 * Cq ? 1 : 2);      // q, k, v (a chunk never straddles)
  const int col = kind == 2 ? ch - 2 * Cq : ch - kind * Cq;  // channel within q, k or v
  const size_t stride = kind == 2 ? Cv : Cq;
  auto* const dst = chunk_dst(out, kind) + col;
  // The head's first lane writes its factor (rq = inv / sqrt(dk), rk = inv; none in fp32 form).
  float* const fdst = kind != 2 && col % a.dk == 0 ? factor_dst(out, kind) : nullptr;
  const int head = kind == 2 ? 0 : col / a.dk;
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
      for (int j = 0; j < kConvK; ++j) {
        cw[m][j] = f[(m * kConvK + j) / 8][(m * kConvK + j) % 8];
        // Opaque, so the 32 taps stay widened in registers: otherwise the compiler re-widens them
        // from the bf16 words at every use (one more integer op per multiply-add).
        asm("" : "+f"(cw[m][j]));
      }
  }
  // Positions (taps reach back at most p rows), one group ahead; past T: all taps (unused).
  const auto pos = [&](int t) {
    return t >= a.T ? kTileHalo : (a.positions ? __ldg(a.positions + t) : t);
  };
  int p[kTileGroup];
#pragma unroll
  for (int i = 0; i < kTileGroup; ++i) p[i] = pos(t0 + i);
  const float fs = kind == 0 ? rsqrtf(static_cast<float>(a.dk)) : 1.0f;  // see store_qk
  for (int gi = 0; gi < ng; ++gi) {
    const int tg = t0 + gi * kTileGroup;
    int pn[kTileGroup];
#pragma unroll
    for (int i = 0; i < kTileGroup; ++i) pn[i] = pos(tg + kTileGroup + i);
    cp_async_wait_upto(ng - 1 - gi);  // this group's rows have landed (the later ones may not)
    bool full = true;
#pragma unroll
    for (int i = 0; i < kTileGroup; ++i) full &= p[i] >= kTileHalo;
    float acc[kTileGroup][8];
    if (full)
      conv_group<false, E, P>(tile, gi * kTileGroup, tid, cw, p, acc);
    else
      conv_group<true, E, P>(tile, gi * kTileGroup, tid, cw, p, acc);
#pragma unroll
    for (int i = 0; i < kTileGroup; ++i) {
      const int t = tg + i;
      rnd8<E>(acc[i]);
      float s[8];
#pragma unroll
      for (int m = 0; m < 8; ++m) s[m] = silu_rounded_to<E>(acc[i][m]);
      const Vec8<E> yv = pack8<E>(s);
      float y[8];
      unpack8(yv, y);  // rnd<E>(silu_rounded_to<E>(rnd<E>(acc)))
      float ss = 0.0f;
#pragma unroll
      for (int m = 0; m < 8; ++m) ss += y[m] * y[m];
      ss = group_sum(ss, lpg);  // every lane: the shuffles need them all
      if (active && t < a.T) {
        const size_t row = static_cast<size_t>(t);
        if (kind == 2) {
          store_v(dst + row * stride, y, yv);
        } else {
          const float inv = rsqrtf(ss + 1e-6f);
          store_qk(dst + row * stride, y, yv, inv, fs);
          if (fdst) fdst[row * a.Hk + head] = inv * fs;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kTileGroup; ++i) p[i] = pn[i];
  }
}

bool gdn_conv_prep_tile_shape(const GdnPrepArgs& a) {
  const int lpg = a.dk / 8;  // lanes per q/k head in the tile variant
  return a.K == kConvK && a.dk % 8 == 0 && lpg <= 32 && (lpg & (lpg - 1)) == 0 &&
         (a.Hv * a.dv) % 8 == 0 && a.ld % 8 == 0;
}

bool aligned16(const Fp32Out& o) {
  return aligned16(o.q) && aligned16(o.k) && aligned16(o.v);
}
bool aligned16(const Bf16xOut& o) {
  return aligned16(o.xq) && aligned16(o.xk) && aligned16(o.xv);
}

// Whether the tile variant runs (the factors and g, beta are stored one by one: any alignment).
template <typename E, typename Out>
bool takes_tile(const E* proj, const E* conv_w, const GdnPrepArgs& a, const Out& out,
                KernelPath path) {
  return path == KernelPath::Auto && gdn_conv_prep_tile_shape(a) && aligned16(proj) &&
         aligned16(conv_w) && aligned16(out);
}

// Tokens per tile block: the most (fewest halo re-reads, most bytes in flight per thread) that
// still give kTileMinBlocks blocks. Flash shape (8 channel blocks): n = 8 at T = 361 (368 blocks),
// 16 from T = 657 on (T = 961: 488 blocks, 3.7 per SM).
template <typename E>
int tile_tokens(int T, int gy) {
  int n = tile_max_tokens<E>();
  while (n > kTileGroup && static_cast<long long>((T + n - 1) / n) * gy < kTileMinBlocks)
    n -= kTileGroup;
  return n;
}

template <typename E, typename Out>
void launch_prep(const E* proj, const E* conv_w, const float* A_log, const float* dt_bias,
                 const GdnPrepArgs& a, const Out& out, KernelPath path, cudaStream_t s) {
  if (a.T <= 0) return;
  if (a.dk > 128 * kMaxPerThread || a.dv > 128 * kMaxPerThread)
    throw std::invalid_argument("gdn_conv_prep: head dim above 512");
  if (takes_tile(proj, conv_w, a, out, path)) {
    const int lpg = a.dk / 8;  // lanes per q/k head
    const int nc = (2 * a.Hk * a.dk + a.Hv * a.dv) / 8;
    const int gy = (nc + kTileThreads - 1) / kTileThreads;
    const int n = a.tile_tokens ? a.tile_tokens : tile_tokens<E>(a.T, gy);
    if (n % kTileGroup != 0 || n < kTileGroup || n > tile_max_tokens<E>())
      throw std::invalid_argument("gdn_conv_prep: tile_tokens not a multiple of 4 in [4, " +
                                  std::to_string(tile_max_tokens<E>()) + "]");
    gdn_conv_prep_tile_kernel<E, Out><<<dim3((a.T + n - 1) / n, gy), kTileThreads, 0, s>>>(
        proj, conv_w, A_log, dt_bias, a, n, lpg, out);
    CLEF_CUDA_LAUNCH_CHECK();
    return;
  }
  dim3 grid(a.T, 2 * a.Hk + a.Hv);
  gdn_conv_prep_generic_kernel<E, Out><<<grid, 128, 0, s>>>(proj, conv_w, A_log, dt_bias, a, out);
  CLEF_CUDA_LAUNCH_CHECK();
}

}  // namespace

const char* gdn_conv_prep_variant(const GdnPrepArgs& a, KernelPath path) {
  return path == KernelPath::Auto && gdn_conv_prep_tile_shape(a) ? "gdn_conv_prep_tile"
                                                                 : "gdn_conv_prep_generic";
}

const char* gdn_conv_prep_bf16x_variant(const GdnPrepArgs& a, KernelPath path) {
  return path == KernelPath::Auto && gdn_conv_prep_tile_shape(a) ? "gdn_conv_prep_bf16x_tile"
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

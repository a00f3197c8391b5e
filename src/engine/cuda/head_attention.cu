#include "engine/cuda/head_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/cuda/cuda_check.h"

namespace clef::engine::cuda {
namespace {

constexpr int kThreads = 128;  // kHeadAttnTile queries x 8 lanes
constexpr int kLanesPerQuery = kThreads / kHeadAttnTile;
constexpr int kKeyBlock = 32;  // keys staged per step: 4 per lane
constexpr int kDimsPerLane = kHeadAttnMaxHeadDim / kLanesPerQuery;
static_assert(kLanesPerQuery == 8 && kKeyBlock == 4 * kLanesPerQuery);

__device__ __forceinline__ float group_max(float v) {  // over a query's 8 lanes
#pragma unroll
  for (int o = 1; o < kLanesPerQuery; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = 1; o < kLanesPerQuery; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A block of up to 32 keys' K and V rows in registers (float4; hd % 4 == 0): fetched while the
// previous block is scored, so the loads' latency hides behind the arithmetic (a load-then-store
// loop would wait one round trip per element).
struct KvStage {
  static constexpr int kSlots = kKeyBlock * kHeadAttnMaxHeadDim / 4 / kThreads;
  float4 k[kSlots], v[kSlots];
};
__device__ __forceinline__ void fetch_kv(KvStage& st, const float* __restrict__ k,
                                         const float* __restrict__ v, int ldkv, int col, int hd,
                                         int kb, int nk, int tid) {
  const int hd4 = hd / 4, n4 = nk * hd4;
#pragma unroll
  for (int u = 0; u < KvStage::kSlots; ++u) {
    const int e = tid + u * kThreads;
    if (e < n4) {
      const size_t off = static_cast<size_t>(kb + e / hd4) * ldkv + col + 4 * (e % hd4);
      st.k[u] = __ldg(reinterpret_cast<const float4*>(k + off));
      st.v[u] = __ldg(reinterpret_cast<const float4*>(v + off));
    }
  }
}
__device__ __forceinline__ void stash_kv(const KvStage& st, float* Ks, float* Vs, int hp, int hd,
                                         int nk, int tid) {
  const int hd4 = hd / 4, n4 = nk * hd4;
#pragma unroll
  for (int u = 0; u < KvStage::kSlots; ++u) {
    const int e = tid + u * kThreads;
    if (e < n4) {
      const int r = e / hd4, c = 4 * (e % hd4);
      *reinterpret_cast<float4*>(Ks + r * hp + c) = st.k[u];
      *reinterpret_cast<float4*>(Vs + r * hd + c) = st.v[u];
    }
  }
}

// One CTA: an item's queries (<= 16) x one head over the item's keys, online softmax in blocks of
// 32 keys. Lane l8 of query qi scores keys l8 + 8c and accumulates dims l8 + 8i. VEC (hd % 4 ==
// 0, 16-byte aligned rows): float4 loads, K rows padded to hd + 4 (a warp's eight keys then start
// in distinct bank quads), the next block fetched into registers during this one. Otherwise
// scalar, rows padded to hd + 1.
template <bool VEC>
__global__ void __launch_bounds__(kThreads)
    head_attention_partial(const float* __restrict__ q, int ldq, const float* __restrict__ k,
                           const float* __restrict__ v, int ldkv, int heads, int hd, float scale,
                           const int32_t* __restrict__ items, float* __restrict__ part_ml,
                           float* __restrict__ part_acc) {
  extern __shared__ __align__(16) float sm[];
  const int hp = VEC ? hd + 4 : hd + 1;
  float* Qs = sm;                       // [16][hp]
  float* Ks = Qs + kHeadAttnTile * hp;  // [32][hp]
  float* Vs = Ks + kKeyBlock * hp;      // [32][hd]
  float* Ps = Vs + kKeyBlock * hd;      // [16][33]
  const int32_t* it = items + 5 * static_cast<size_t>(blockIdx.x);
  const int q0 = it[0], nq = it[1], k0 = it[2], k1 = it[3], part0 = it[4];
  const int h = blockIdx.y;
  const int tid = threadIdx.x, qi = tid / kLanesPerQuery, l8 = tid % kLanesPerQuery;
  KvStage st;
  if constexpr (VEC) {
    fetch_kv(st, k, v, ldkv, h * hd, hd, k0, min(kKeyBlock, k1 - k0), tid);
    constexpr int kQSlots = kHeadAttnTile * kHeadAttnMaxHeadDim / 4 / kThreads;
    float4 qr[kQSlots];
    const int hd4 = hd / 4;
#pragma unroll
    for (int u = 0; u < kQSlots; ++u) {
      const int e = tid + u * kThreads, r = e / hd4;
      qr[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (e < kHeadAttnTile * hd4 && r < nq)
        qr[u] = __ldg(reinterpret_cast<const float4*>(q + static_cast<size_t>(q0 + r) * ldq +
                                                      h * hd + 4 * (e % hd4)));
    }
#pragma unroll
    for (int u = 0; u < kQSlots; ++u) {
      const int e = tid + u * kThreads;
      if (e < kHeadAttnTile * hd4)
        *reinterpret_cast<float4*>(Qs + (e / hd4) * hp + 4 * (e % hd4)) = qr[u];
    }
  } else {
    for (int e = tid; e < kHeadAttnTile * hd; e += kThreads) {
      const int r = e / hd, d = e % hd;
      Qs[r * hp + d] = r < nq ? q[static_cast<size_t>(q0 + r) * ldq + h * hd + d] : 0.f;
    }
  }
  float m = -INFINITY, l = 0.f;
  float acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) acc[i] = 0.f;
  for (int kb = k0; kb < k1; kb += kKeyBlock) {
    const int nk = min(kKeyBlock, k1 - kb);
    __syncthreads();  // the previous block's reads are done (and Qs is written)
    if constexpr (VEC) {
      stash_kv(st, Ks, Vs, hp, hd, nk, tid);
      __syncthreads();
      if (kb + kKeyBlock < k1)
        fetch_kv(st, k, v, ldkv, h * hd, hd, kb + kKeyBlock, min(kKeyBlock, k1 - kb - kKeyBlock),
                 tid);
    } else {
      for (int e = tid; e < nk * hd; e += kThreads) {
        const int r = e / hd, d = e % hd;
        const size_t off = static_cast<size_t>(kb + r) * ldkv + h * hd + d;
        Ks[r * hp + d] = k[off];
        Vs[r * hd + d] = v[off];
      }
      __syncthreads();
    }
    // Scores of keys l8 + 8c (rows past nk hold stale values: computed, then masked).
    float dot[4] = {0.f, 0.f, 0.f, 0.f};
    if constexpr (VEC) {
      for (int d = 0; d < hd; d += 4) {
        const float4 a = *reinterpret_cast<const float4*>(Qs + qi * hp + d);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float4 b =
              *reinterpret_cast<const float4*>(Ks + (l8 + kLanesPerQuery * c) * hp + d);
          dot[c] = fmaf(a.x, b.x, dot[c]);
          dot[c] = fmaf(a.y, b.y, dot[c]);
          dot[c] = fmaf(a.z, b.z, dot[c]);
          dot[c] = fmaf(a.w, b.w, dot[c]);
        }
      }
    } else {
      for (int d = 0; d < hd; ++d) {
        const float a = Qs[qi * hp + d];
#pragma unroll
        for (int c = 0; c < 4; ++c)
          dot[c] = fmaf(a, Ks[(l8 + kLanesPerQuery * c) * hp + d], dot[c]);
      }
    }
    float sc[4];
    float bm = -INFINITY;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      sc[c] = l8 + kLanesPerQuery * c < nk ? dot[c] * scale : -INFINITY;
      bm = fmaxf(bm, sc[c]);
    }
    const float mn = fmaxf(m, group_max(bm));  // finite: every block has a key
    const float corr = expf(m - mn);           // 0 on the first block
    float ps = 0.f;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = l8 + kLanesPerQuery * c;
      const float p = j < nk ? expf(sc[c] - mn) : 0.f;
      Ps[qi * (kKeyBlock + 1) + j] = p;
      ps += p;
    }
    l = l * corr + group_sum(ps);
    __syncwarp();  // a query's 8 lanes share one warp
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = l8 + kLanesPerQuery * i;
      if (d < hd) {
        float a = acc[i] * corr;
#pragma unroll 4
        for (int j = 0; j < nk; ++j) a = fmaf(Ps[qi * (kKeyBlock + 1) + j], Vs[j * hd + d], a);
        acc[i] = a;
      }
    }
    m = mn;
  }
  if (qi >= nq) return;
  const size_t p = static_cast<size_t>(part0 + qi) * heads + h;
  if (l8 == 0) {
    part_ml[2 * p] = m;
    part_ml[2 * p + 1] = l;
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = l8 + kLanesPerQuery * i;
    if (d < hd) part_acc[p * hd + d] = acc[i];
  }
}

// One CTA per (query, head): its splits merged in split order, then normalised. Every split's
// partials are loaded before any is used (a loop that loaded one and used it would wait one L2
// round trip per split).
__global__ void head_attention_combine(const int32_t* __restrict__ combine, int heads, int hd,
                                       const float* __restrict__ part_ml,
                                       const float* __restrict__ part_acc, float* __restrict__ out,
                                       int ldo) {
  constexpr int kMax = kHeadAttnSplitsPerTile;
  const int i = blockIdx.x, h = blockIdx.y;
  const int first = combine[3 * i], stride = combine[3 * i + 1], n = combine[3 * i + 2];
  float mj[kMax], w[kMax];
  size_t pj[kMax];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    pj[j] = static_cast<size_t>(first + j * stride) * heads + h;
    mj[j] = j < n ? part_ml[2 * pj[j]] : -INFINITY;
    w[j] = j < n ? part_ml[2 * pj[j] + 1] : 0.f;  // l, until it becomes the weight below
  }
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < kMax; ++j) mx = fmaxf(mx, mj[j]);
  float L = 0.f;
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    if (j >= n) break;
    const float e = expf(mj[j] - mx);
    L = fmaf(w[j], e, L);
    w[j] = e;
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a[kMax];
#pragma unroll
    for (int j = 0; j < kMax; ++j) a[j] = j < n ? part_acc[pj[j] * hd + d] : 0.f;
    float A = 0.f;
#pragma unroll
    for (int j = 0; j < kMax; ++j) {
      if (j >= n) break;
      A = fmaf(a[j], w[j], A);
    }
    out[static_cast<size_t>(i) * ldo + h * hd + d] = A / L;
  }
}

}  // namespace

HeadAttnPlan plan_head_attention(const std::vector<int>& queries, const std::vector<int>& key_begin,
                                 const std::vector<int>& keys) {
  if (queries.size() != key_begin.size() || queries.size() != keys.size())
    throw std::invalid_argument("plan_head_attention: one query count and key range a request");
  HeadAttnPlan p;
  int q0 = 0;
  for (size_t r = 0; r < queries.size(); ++r) {
    const int nq = queries[r], nk = keys[r];
    if (nq < 0) throw std::invalid_argument("plan_head_attention: negative query count");
    if (nq == 0) continue;
    if (nk < 1 || key_begin[r] < 0)
      throw std::invalid_argument("plan_head_attention: a request with queries has no keys");
    const int tiles = (nq + kHeadAttnTile - 1) / kHeadAttnTile;
    int splits = (nk + kHeadAttnKeysPerSplit - 1) / kHeadAttnKeysPerSplit;
    splits = std::max(1, std::min(splits, kHeadAttnSplitsPerTile / tiles));
    const int per = ((nk + splits - 1) / splits + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
    splits = (nk + per - 1) / per;
    for (int t = 0; t < tiles; ++t) {
      const int tq0 = q0 + t * kHeadAttnTile, tn = std::min(kHeadAttnTile, nq - t * kHeadAttnTile);
      const int first = p.parts;
      for (int j = 0; j < splits; ++j) {
        const int kb = key_begin[r] + j * per, ke = std::min(kb + per, key_begin[r] + nk);
        p.items.insert(p.items.end(), {tq0, tn, kb, ke, p.parts});
        p.parts += tn;
      }
      for (int i = 0; i < tn; ++i) p.combine.insert(p.combine.end(), {first + i, tn, splits});
    }
    q0 += nq;
  }
  return p;
}

void head_attention(const float* q, int ldq, const float* k, const float* v, int ldkv, int heads,
                    int hd, float scale, const HeadAttnTables& t, float* part_ml, float* part_acc,
                    float* out, int ldo, cudaStream_t s) {
  if (t.item_count <= 0 || t.query_count <= 0) return;
  if (hd <= 0 || hd > kHeadAttnMaxHeadDim || heads <= 0 || heads > 65535)
    throw std::runtime_error("joint head attention: head dim " + std::to_string(hd) +
                             " outside 1.." + std::to_string(kHeadAttnMaxHeadDim));
  const auto aligned = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec =
      hd % 4 == 0 && ldq % 4 == 0 && ldkv % 4 == 0 && aligned(q) && aligned(k) && aligned(v);
  const size_t smem =
      sizeof(float) * (static_cast<size_t>(kHeadAttnTile + kKeyBlock) * (hd + (vec ? 4 : 1)) +
                       static_cast<size_t>(kKeyBlock) * hd + kHeadAttnTile * (kKeyBlock + 1));
  const dim3 grid(t.item_count, heads);
  if (vec)
    head_attention_partial<true><<<grid, kThreads, smem, s>>>(q, ldq, k, v, ldkv, heads, hd, scale,
                                                              t.items, part_ml, part_acc);
  else
    head_attention_partial<false><<<grid, kThreads, smem, s>>>(q, ldq, k, v, ldkv, heads, hd, scale,
                                                               t.items, part_ml, part_acc);
  CLEF_CUDA_LAUNCH_CHECK();
  head_attention_combine<<<dim3(t.query_count, heads),
                           hd <= 32   ? 32
                           : hd <= 64 ? 64
                                      : 128,
                           0, s>>>(t.combine, heads, hd, part_ml, part_acc, out, ldo);
  CLEF_CUDA_LAUNCH_CHECK();
}

}  // namespace clef::engine::cuda

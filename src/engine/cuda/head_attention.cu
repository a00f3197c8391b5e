#include "engine/cuda/head_attention.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace clef::engine::cuda {
namespace {

constexpr int kThreads = 128;  // kHeadAttnTile queries x 8 lanes
constexpr int kLanesPerQuery = kThreads / kHeadAttnTile;
constexpr int kKeyBlock = 32;  // keys staged per step: 4 per lane
constexpr int kDimsPerLane = kHeadAttnMaxHeadDim / kLanesPerQuery;
static_assert(kLanesPerQuery == 8 && kKeyBlock == 4 * kLanesPerQuery);

void check(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("joint head kernel ") + what + ": " +
                             cudaGetErrorString(e));
}

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

// One CTA: an item's queries (<= 16) x one head over the item's keys, online softmax in blocks of
// 32 keys. Lane l8 of query qi scores keys l8 + 8c and accumulates dims l8 + 8i. Shared rows are
// padded (hd + 1, 33) so a warp's four queries and eight keys fall in distinct banks.
__global__ void __launch_bounds__(kThreads)
    head_attention_partial(const float* __restrict__ q, int ldq, const float* __restrict__ k,
                           const float* __restrict__ v, int ldkv, int heads, int hd, float scale,
                           const int32_t* __restrict__ items, float* __restrict__ part_ml,
                           float* __restrict__ part_acc) {
  extern __shared__ float sm[];
  const int hp = hd + 1;
  float* Qs = sm;                       // [16][hp]
  float* Ks = Qs + kHeadAttnTile * hp;  // [32][hp]
  float* Vs = Ks + kKeyBlock * hp;      // [32][hd]
  float* Ps = Vs + kKeyBlock * hd;      // [16][33]
  const int32_t* it = items + 5 * static_cast<size_t>(blockIdx.x);
  const int q0 = it[0], nq = it[1], k0 = it[2], k1 = it[3], part0 = it[4];
  const int h = blockIdx.y;
  const int tid = threadIdx.x, qi = tid / kLanesPerQuery, l8 = tid % kLanesPerQuery;
  for (int e = tid; e < kHeadAttnTile * hd; e += kThreads) {
    const int r = e / hd, d = e % hd;
    Qs[r * hp + d] = r < nq ? q[static_cast<size_t>(q0 + r) * ldq + h * hd + d] : 0.f;
  }
  float m = -INFINITY, l = 0.f;
  float acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) acc[i] = 0.f;
  for (int kb = k0; kb < k1; kb += kKeyBlock) {
    const int nk = min(kKeyBlock, k1 - kb);
    __syncthreads();  // the previous block's reads are done (and Qs is written)
    for (int e = tid; e < nk * hd; e += kThreads) {
      const int r = e / hd, d = e % hd;
      const size_t off = static_cast<size_t>(kb + r) * ldkv + h * hd + d;
      Ks[r * hp + d] = k[off];
      Vs[r * hd + d] = v[off];
    }
    __syncthreads();
    float sc[4];
    float bm = -INFINITY;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = l8 + kLanesPerQuery * c;
      sc[c] = -INFINITY;
      if (j < nk) {
        float dot = 0.f;
        for (int d = 0; d < hd; ++d) dot = fmaf(Qs[qi * hp + d], Ks[j * hp + d], dot);
        sc[c] = dot * scale;
        bm = fmaxf(bm, sc[c]);
      }
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

// One CTA per query: its splits merged in split order, then normalised.
__global__ void head_attention_combine(const int32_t* __restrict__ combine, int heads, int hd,
                                       const float* __restrict__ part_ml,
                                       const float* __restrict__ part_acc, float* __restrict__ out,
                                       int ldo) {
  const int i = blockIdx.x;
  const int first = combine[3 * i], stride = combine[3 * i + 1], n = combine[3 * i + 2];
  for (int e = threadIdx.x; e < heads * hd; e += blockDim.x) {
    const int h = e / hd, d = e % hd;
    float mx = -INFINITY;
    for (int j = 0; j < n; ++j)
      mx = fmaxf(mx, part_ml[2 * (static_cast<size_t>(first + j * stride) * heads + h)]);
    float L = 0.f, A = 0.f;
    for (int j = 0; j < n; ++j) {
      const size_t p = static_cast<size_t>(first + j * stride) * heads + h;
      const float w = expf(part_ml[2 * p] - mx);
      L = fmaf(part_ml[2 * p + 1], w, L);
      A = fmaf(part_acc[p * hd + d], w, A);
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
  const size_t smem =
      sizeof(float) * (static_cast<size_t>(kHeadAttnTile + kKeyBlock) * (hd + 1) +
                       static_cast<size_t>(kKeyBlock) * hd + kHeadAttnTile * (kKeyBlock + 1));
  head_attention_partial<<<dim3(t.item_count, heads), kThreads, smem, s>>>(
      q, ldq, k, v, ldkv, heads, hd, scale, t.items, part_ml, part_acc);
  check("head_attention_partial");
  head_attention_combine<<<t.query_count, 256, 0, s>>>(t.combine, heads, hd, part_ml, part_acc, out,
                                                       ldo);
  check("head_attention_combine");
}

}  // namespace clef::engine::cuda

// The joint head's few-row linear kernel (head_kernels::skinny_linear) against a double-precision
// CPU loop on fresh random inputs: row counts across its 8-row passes, K on and off the 16-byte
// path (K % 8, a misaligned weight pointer), bias / GELU / accumulate, outputs NaN-poisoned first
// (except when accumulating). The batch's attention (head_attention.h) against a double-precision
// softmax per request on random packings, alone vs packed bit for bit, and its plan's invariants.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/head_attention.h"
#include "engine/cuda/head_kernels.h"
#include "support/ref/head_ref.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using namespace clef::gputest;

double gelu_erf(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

TEST(HeadKernels, SkinnyLinearMatchesDoubleReference) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    int M, K, N, w_off;  // w_off: elements the weight pointer sits past a 16-byte boundary
    bool bias, gelu, accumulate;
  };
  for (Case c :
       {Case{1, 4096, 1024, 0, false, false, false}, Case{2, 1024, 3072, 0, true, false, true},
        Case{7, 1024, 4096, 0, true, true, false}, Case{9, 4096, 1000, 0, true, false, false},
        Case{17, 256, 33, 0, false, true, false}, Case{3, 100, 50, 0, true, false, true},
        Case{5, 1024, 64, 1, true, true, false}, Case{64, 64, 96, 0, false, false, true}}) {
    SCOPED_TRACE("M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) +
                 " N=" + std::to_string(c.N) + " w_off=" + std::to_string(c.w_off));
    auto x = randn(rng, size_t(c.M) * c.K);
    auto w = randn(rng, size_t(c.N) * c.K + c.w_off, 0.05f);
    round_all_bf16(w);  // the head's weights are bf16
    auto bias = randn(rng, c.N);
    auto y0 = randn(rng, size_t(c.M) * c.N);
    auto dx = to_device<float>(x), dw = to_device<__nv_bfloat16>(w), db = to_device<float>(bias);
    DeviceBuffer dy = c.accumulate ? to_device<float>(y0) : poisoned<float>(y0.size());
    head_kernels::skinny_linear(dx.get<float>(), c.M, c.K, dw.get<__nv_bfloat16>() + c.w_off, c.N,
                                c.bias ? db.get<float>() : nullptr, c.gelu, c.accumulate,
                                dy.get<float>(), 0);
    std::vector<float> ref(y0.size());
    for (int m = 0; m < c.M; ++m)
      for (int n = 0; n < c.N; ++n) {
        double v = 0;
        for (int k = 0; k < c.K; ++k)
          v += double(x[size_t(m) * c.K + k]) * w[c.w_off + size_t(n) * c.K + k];
        if (c.accumulate) v += y0[size_t(m) * c.N + n];
        if (c.bias) v += bias[n];
        ref[size_t(m) * c.N + n] = float(c.gelu ? gelu_erf(v) : v);
      }
    CLEF_EXPECT_CLOSE(to_host<float>(dy, ref.size()), ref, 2e-6);
  }
}

DeviceBuffer ints_to_device(const std::vector<int32_t>& v) {
  DeviceBuffer b(std::max<size_t>(v.size() * 4, 1));
  CLEF_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  return b;
}

// Runs the plan of (nq, k0, nk) on the device: out [sum(nq), heads * hd].
std::vector<float> head_attention_gpu(const std::vector<float>& q, const DeviceBuffer& dkv,
                                      const std::vector<int>& nq, const std::vector<int>& k0,
                                      const std::vector<int>& nk, int heads, int hd) {
  const int W = heads * hd;
  const HeadAttnPlan p = plan_head_attention(nq, k0, nk);
  std::vector<int32_t> table = p.items;
  table.insert(table.end(), p.combine.begin(), p.combine.end());
  auto dt = ints_to_device(table);
  auto dq = to_device<float>(q);
  DeviceBuffer ml(std::max<size_t>(1, size_t(2) * p.parts * heads) * 4);
  DeviceBuffer acc(std::max<size_t>(1, size_t(p.parts) * heads * hd) * 4);
  DeviceBuffer out = poisoned<float>(size_t(p.query_count()) * W);
  const HeadAttnTables t{dt.get<int32_t>(), dt.get<int32_t>() + p.items.size(), p.item_count(),
                         p.query_count(), p.parts};
  head_attention(dq.get<float>(), W, dkv.get<float>(), dkv.get<float>() + W, 2 * W, heads, hd,
                 float(1.0 / std::sqrt(double(hd))), t, ml.get<float>(), acc.get<float>(),
                 out.get<float>(), W, 0);
  return to_host<float>(out, size_t(p.query_count()) * W);
}

TEST(HeadKernels, HeadAttentionMatchesDoubleReferenceOnRandomPackings) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    int heads, hd;
    std::vector<int> nq, nk;  // per request
  };
  const std::vector<Case> cases = {
      {16, 64, {3, 10, 1}, {1, 63, 64}},            // the flash head's 16 x 64
      {16, 64, {40, 2}, {65, 1000}},                // 3 query tiles; 4 key splits
      {4, 8, {1, 17, 5, 33}, {3000, 1, 129, 257}},  // tiny-model dims, long and short mixed
      {2, 128, {16, 16}, {5661, 32}},               // the largest head dim; 16 splits
      {3, 24, {7, 1, 2}, {31, 33, 300}},            // hd off the 8-lane grid's multiples of 32
      {1, 1, {20}, {70}}};
  for (const Case& c : cases) {
    const int W = c.heads * c.hd;
    std::vector<int> k0;
    int keys = 0, queries = 0;
    for (size_t r = 0; r < c.nk.size(); ++r) {
      k0.push_back(keys);
      keys += c.nk[r];
      queries += c.nq[r];
    }
    SCOPED_TRACE("heads " + std::to_string(c.heads) + " hd " + std::to_string(c.hd) + " nq " +
                 comma_list(c.nq) + " nk " + comma_list(c.nk));
    // Scores spread over a few units (and one query's much wider), as real memories give.
    auto q = randn(rng, size_t(queries) * W, 1.5f);
    auto kv = randn(rng, size_t(keys) * 2 * W);
    for (int e = 0; e < W; ++e) q[e] *= 4.f;
    auto dkv = to_device<float>(kv);
    const auto got = head_attention_gpu(q, dkv, c.nq, k0, c.nk, c.heads, c.hd);
    const auto ref = engine::ref::head_attention_ref(q, kv, c.nq, k0, c.nk, c.heads, c.hd);
    std::vector<float> reff(ref.begin(), ref.end());
    CLEF_EXPECT_CLOSE(got, reff, 2e-5);
    // Each request alone (its own plan, its keys at row 0 of a copy) gives the same bits.
    for (size_t r = 0, i0 = 0; r < c.nq.size(); i0 += c.nq[r], ++r) {
      std::vector<float> q1(q.begin() + i0 * W, q.begin() + (i0 + c.nq[r]) * W);
      std::vector<float> kv1(kv.begin() + size_t(k0[r]) * 2 * W,
                             kv.begin() + size_t(k0[r] + c.nk[r]) * 2 * W);
      auto dkv1 = to_device<float>(kv1);
      const auto alone = head_attention_gpu(q1, dkv1, {c.nq[r]}, {0}, {c.nk[r]}, c.heads, c.hd);
      EXPECT_EQ(0, std::memcmp(alone.data(), got.data() + i0 * W, alone.size() * 4))
          << "request " << r << " alone differs from packed";
    }
  }
}

TEST(HeadKernels, HeadAttentionPlanCoversEveryKeyOnceAndStaysInItsBound) {
  auto rng = fresh_rng();
  std::uniform_int_distribution<int> nq_d(0, 300), nk_d(1, 20000), count_d(1, 12);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int> nq, k0, nk;
    const int n = count_d(rng);
    int keys = 0, queries = 0;
    for (int r = 0; r < n; ++r) {
      nq.push_back(trial % 3 == 0 ? std::min(nq_d(rng), 20) : nq_d(rng));
      nk.push_back(trial % 2 ? nk_d(rng) : std::min(nk_d(rng), 70));
      k0.push_back(keys);
      keys += nk.back();
      queries += nq.back();
    }
    const HeadAttnPlan p = plan_head_attention(nq, k0, nk);
    ASSERT_EQ(p.query_count(), queries);
    EXPECT_LE(size_t(p.parts), head_attention_parts_bound(size_t(queries), size_t(n)));
    // Every query's splits: consecutive items of one tile that cover its request's keys in order,
    // each split a multiple of 32 keys but the last, and each item's part slots its own.
    std::vector<int> owner;
    for (int r = 0; r < n; ++r) owner.insert(owner.end(), nq[r], r);
    std::vector<int> part_use(p.parts, 0), part_item(p.parts, -1);
    for (int i = 0; i < p.item_count(); ++i) {
      const int32_t* it = &p.items[5 * i];
      ASSERT_GE(it[1], 1);
      ASSERT_LE(it[1], kHeadAttnTile);
      for (int j = 0; j < it[1]; ++j) {
        ++part_use[it[4] + j];
        part_item[it[4] + j] = i;
      }
    }
    for (int u : part_use) ASSERT_EQ(u, 1);
    for (int qi = 0; qi < queries; ++qi) {
      const int first = p.combine[3 * qi], stride = p.combine[3 * qi + 1],
                splits = p.combine[3 * qi + 2];
      const int r = owner[qi];
      ASSERT_GE(splits, 1);
      EXPECT_LE(splits, kHeadAttnSplitsPerTile);
      int next_key = k0[r];
      for (int j = 0; j < splits; ++j) {
        const int part = first + j * stride;
        ASSERT_GE(part, 0);
        ASSERT_LT(part, p.parts);
        const int32_t* hit = &p.items[5 * part_item[part]];  // the item holding this part
        EXPECT_EQ(hit[0] + (part - hit[4]), qi);             // the slot is this query's
        EXPECT_EQ(hit[2], next_key);
        if (j + 1 < splits) EXPECT_EQ((hit[3] - hit[2]) % 32, 0);
        next_key = hit[3];
      }
      EXPECT_EQ(next_key, k0[r] + nk[r]);
    }
  }
  EXPECT_THROW(plan_head_attention({1}, {0}, {0}), std::invalid_argument);
  EXPECT_THROW(plan_head_attention({1, 2}, {0}, {5}), std::invalid_argument);
}

}  // namespace
}  // namespace clef

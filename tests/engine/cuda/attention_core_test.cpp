// attention_core_{bf16,f32} against the CPU reference (support/ref/attention_ref.h, double
// accumulation) on fresh random inputs, outputs poisoned with NaN before every launch. The
// throughput at the Clef-flash shape is measured by the workbench (dev/cuda/attention.cu).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/tuning.h"
#include "engine/cuda/gpu_test_util.h"
#include "support/ref/attention_ref.h"

namespace {

using clef::engine::cuda::attention_core_bf16;
using clef::engine::cuda::attention_core_bf16_warps;
using clef::engine::cuda::attention_core_f32;

// warps 0: the public entry point (its own pick); 4 or 8: that kernel shape.
void run_bf16(int warps, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
              __nv_bfloat16* out, int T, int nh, int nkv, int hd) {
  if (warps == 0)
    attention_core_bf16(q, k, v, out, T, nh, nkv, hd, nullptr);
  else
    attention_core_bf16_warps(warps, q, k, v, out, T, nh, nkv, hd, nullptr);
}

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << cudaGetErrorString(x)

using clef::gputest::fresh_seed;
using clef::gputest::have_gpu;

using clef::engine::ref::attention_ref;

struct Case {
  int T, nh, nkv, hd;
};

struct Errors {
  double rel_l2 = 0, max_abs = 0;
  size_t non_finite = 0;
};

Errors compare(const std::vector<float>& got, const std::vector<double>& ref, int nh, int hd,
               const std::vector<int>& rows, int T) {
  Errors e;
  double num = 0, den = 0;
  auto row_cmp = [&](int t) {
    for (size_t i = static_cast<size_t>(t) * nh * hd; i < static_cast<size_t>(t + 1) * nh * hd;
         ++i) {
      if (!std::isfinite(got[i])) {
        ++e.non_finite;
        continue;
      }
      const double d = got[i] - ref[i];
      num += d * d;
      den += ref[i] * ref[i];
      e.max_abs = std::max(e.max_abs, std::abs(d));
    }
  };
  if (rows.empty())
    for (int t = 0; t < T; ++t) row_cmp(t);
  else
    for (int t : rows) row_cmp(t);
  e.rel_l2 = std::sqrt(num / std::max(den, 1e-300));
  return e;
}

// Random inputs; q is scaled up so that some softmax rows are peaked (exercises the running max).
void random_qkv(std::mt19937_64& rng, const Case& c, std::vector<float>& q, std::vector<float>& k,
                std::vector<float>& v, bool round_bf16) {
  std::normal_distribution<float> n01(0.f, 1.f);
  std::uniform_real_distribution<float> qscale(0.5f, 3.f);
  q.resize(static_cast<size_t>(c.T) * c.nh * c.hd);
  k.resize(static_cast<size_t>(c.T) * c.nkv * c.hd);
  v.resize(k.size());
  const float qs = qscale(rng);
  for (auto& x : q) x = n01(rng) * qs;
  for (auto& x : k) x = n01(rng);
  for (auto& x : v) x = n01(rng);
  if (round_bf16)
    for (auto* vec : {&q, &k, &v})
      for (auto& x : *vec) x = __bfloat162float(__float2bfloat16(x));
}

template <typename T>
struct DevBuf {
  T* p = nullptr;
  explicit DevBuf(size_t n) {
    if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

const Case kCases[] = {
    {1, 8, 2, 32},
    {7, 8, 2, 32},
    {64, 8, 2, 32},
    {65, 8, 2, 32},
    {300, 8, 2, 32},
    {1, 4, 4, 32},
    {7, 4, 4, 32},
    {64, 4, 4, 32},
    {65, 4, 4, 32},
    {300, 4, 4, 32},
    {1, 8, 2, 256},
    {7, 8, 2, 256},
    {64, 8, 2, 256},
    {65, 8, 2, 256},
    {300, 8, 2, 256},
    {1, 4, 4, 256},
    {7, 4, 4, 256},
    {64, 4, 4, 256},
    {65, 4, 4, 256},
    {300, 4, 4, 256},
    {130, 4, 1, 64},
    {130, 6, 3, 128},
    {129, 2, 2, 96},
    {77, 2, 1, 224},
    {127, 2, 1, 256},
    {128, 2, 1, 256},
    {200, 4, 2, 160},
    {257, 2, 2, 192},
    {65, 4, 2, 80},
    {300, 8, 2, 80},
    // The vision tower's head dim unpadded (an odd multiple of 8: the k8 / odd n-tile paths).
    {1, 4, 4, 72},
    {64, 4, 2, 72},
    {65, 4, 2, 72},
    {300, 8, 2, 72},
    {130, 16, 16, 72},
};

class AttentionCoreBf16 : public testing::TestWithParam<int> {};

TEST_P(AttentionCoreBf16, MatchesReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const int warps = GetParam();
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (const Case& c : kCases) {
    SCOPED_TRACE(testing::Message() << "warps " << warps << " seed " << seed << " T " << c.T
                                    << " nh " << c.nh << " nkv " << c.nkv << " hd " << c.hd);
    std::vector<float> q, k, v;
    random_qkv(rng, c, q, k, v, true);
    std::vector<__nv_bfloat16> hq(q.size()), hk(k.size()), hv(v.size());
    for (size_t i = 0; i < q.size(); ++i) hq[i] = __float2bfloat16(q[i]);
    for (size_t i = 0; i < k.size(); ++i)
      hk[i] = __float2bfloat16(k[i]), hv[i] = __float2bfloat16(v[i]);
    DevBuf<__nv_bfloat16> dq(q.size()), dk(k.size()), dv(v.size()), dout(q.size());
    ASSERT_TRUE(dq.p && dk.p && dv.p && dout.p);
    CUDA_OK(cudaMemcpy(dq.p, hq.data(), q.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dk.p, hk.data(), k.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dv.p, hv.data(), v.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dout.p, 0xFF, q.size() * 2));  // NaN poison
    run_bf16(warps, dq.p, dk.p, dv.p, dout.p, c.T, c.nh, c.nkv, c.hd);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> hout(q.size());
    CUDA_OK(cudaMemcpy(hout.data(), dout.p, q.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<float> got(q.size());
    for (size_t i = 0; i < got.size(); ++i) got[i] = __bfloat162float(hout[i]);
    std::vector<double> ref;
    attention_ref(q, k, v, c.T, c.nh, c.nkv, c.hd, {}, ref);
    const Errors e = compare(got, ref, c.nh, c.hd, {}, c.T);
    EXPECT_EQ(e.non_finite, 0u);
    // bf16 output rounding alone is ~2^-9 relative; P is rounded to bf16 for the PV product.
    EXPECT_LT(e.rel_l2, 8e-3);
    EXPECT_LT(e.max_abs, 5e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(Warps, AttentionCoreBf16, testing::Values(0, 4, 8));

TEST(AttentionCore, F32MatchesReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (const Case& c : kCases) {
    SCOPED_TRACE(testing::Message() << "seed " << seed << " T " << c.T << " nh " << c.nh << " nkv "
                                    << c.nkv << " hd " << c.hd);
    std::vector<float> q, k, v;
    random_qkv(rng, c, q, k, v, false);
    DevBuf<float> dq(q.size()), dk(k.size()), dv(v.size()), dout(q.size());
    ASSERT_TRUE(dq.p && dk.p && dv.p && dout.p);
    CUDA_OK(cudaMemcpy(dq.p, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dk.p, k.data(), k.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dv.p, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dout.p, 0xFF, q.size() * 4));
    attention_core_f32(dq.p, dk.p, dv.p, dout.p, c.T, c.nh, c.nkv, c.hd, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got(q.size());
    CUDA_OK(cudaMemcpy(got.data(), dout.p, q.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<double> ref;
    attention_ref(q, k, v, c.T, c.nh, c.nkv, c.hd, {}, ref);
    const Errors e = compare(got, ref, c.nh, c.hd, {}, c.T);
    EXPECT_EQ(e.non_finite, 0u);
    EXPECT_LT(e.rel_l2, 1e-5);
    EXPECT_LT(e.max_abs, 1e-4);
  }
}

TEST(AttentionCore, RefusesBadShapes) {
  EXPECT_THROW(attention_core_bf16(nullptr, nullptr, nullptr, nullptr, 8, 16, 5, 256, nullptr),
               std::invalid_argument);
  EXPECT_THROW(attention_core_bf16(nullptr, nullptr, nullptr, nullptr, 8, 16, 4, 48, nullptr),
               std::invalid_argument);
  EXPECT_THROW(attention_core_f32(nullptr, nullptr, nullptr, nullptr, 8, 16, 4, 288, nullptr),
               std::invalid_argument);
}

}  // namespace

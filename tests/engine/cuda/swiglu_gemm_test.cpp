// The SwiGLU-epilogue GEMM (engine/cuda/gemm/swiglu_gemm.h) against a host reference on fresh
// random inputs (partial row tiles, several weight blocks, more tiles than SMs so the persistent
// loop turns), its rows' independence of M (batch invariance), and swiglu over a regrouped
// gate_up (elementwise.h, group > 0) against the plain layout. The fused kernel needs sm_90.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cuda/gemm/swiglu_gemm.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/elementwise.h"
#include "support/ref/backbone_ref.h"
#include "support/ref/random_inputs.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using namespace clef::gputest;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

std::vector<float> rand_bf16(std::mt19937_64& rng, size_t n, float scale) {
  std::vector<float> v = ref::randn(rng, n, scale);
  ref::round_all_bf16(v);
  return v;
}

// out[m, f] = bf16(bf16(silu(bf16 g)) * bf16 u), g and u summed in double: the kernel's epilogue
// on exactly summed products (the kernel sums in fp32: a rare value rounds the other way).
std::vector<float> host_swiglu_gemm(const std::vector<float>& x, const std::vector<float>& w, int M,
                                    int K, int I) {
  std::vector<float> out(static_cast<size_t>(M) * I);
  for (int m = 0; m < M; ++m)
    for (int f = 0; f < I; ++f) {
      double g = 0, u = 0;
      for (int k = 0; k < K; ++k) {
        const double xv = x[static_cast<size_t>(m) * K + k];
        g += xv * w[static_cast<size_t>(f) * K + k];
        u += xv * w[static_cast<size_t>(I + f) * K + k];
      }
      const float gb = ref::round_bf16(static_cast<float>(g));
      const float ub = ref::round_bf16(static_cast<float>(u));
      const float sg = ref::round_bf16(gb / (1.0f + std::exp(-gb)));
      out[static_cast<size_t>(m) * I + f] = ref::round_bf16(sg * ub);
    }
  return out;
}

DeviceBuffer regrouped(const std::vector<float>& w, int I, int K) {
  DeviceBuffer d = to_device<bf16>(w), scratch(w.size() * sizeof(bf16));
  regroup_gate_up(d.get<bf16>(), scratch.get<bf16>(), I, K);
  return d;
}

TEST(SwigluGemm, MatchesTheHostReference) {
  CLEF_REQUIRE_GPU();
  if (!swiglu_gemm_supported(128, 64)) GTEST_SKIP() << "not an sm_90 device";
  auto rng = fresh_rng();
  struct Case {
    int M, I, K;
  };
  // one row; partial row tiles; 3 weight blocks; 17 x 9 = 153 tiles (more than an H100's SMs)
  for (Case c :
       {Case{1, 128, 64}, Case{200, 256, 128}, Case{333, 384, 256}, Case{2100, 1152, 128}}) {
    SCOPED_TRACE("M " + std::to_string(c.M) + " I " + std::to_string(c.I) + " K " +
                 std::to_string(c.K));
    const auto x = rand_bf16(rng, static_cast<size_t>(c.M) * c.K, 1.0f);
    const auto w = rand_bf16(rng, static_cast<size_t>(2) * c.I * c.K, 1.0f / std::sqrt(c.K));
    DeviceBuffer dx = to_device<bf16>(x), dw = regrouped(w, c.I, c.K);
    DeviceBuffer out = poisoned<bf16>(static_cast<size_t>(c.M) * c.I);
    swiglu_gemm(dx.get<bf16>(), dw.get<bf16>(), out.get<bf16>(), c.M, c.K, c.I, nullptr);
    const auto got = to_host<bf16>(out, static_cast<size_t>(c.M) * c.I);
    const auto want = host_swiglu_gemm(x, w, c.M, c.K, c.I);
    CLEF_EXPECT_CLOSE(got, want, 2e-3);
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
    EXPECT_LE(differ, got.size() / 100) << "values not equal to the reference's";
  }
}

// A row's output bit for bit the same whatever rows run beside it (no split K, row tiles
// independent): the first 300 rows alone and inside 2100.
TEST(SwigluGemm, RowsDoNotDependOnTheRowsBesideThem) {
  CLEF_REQUIRE_GPU();
  if (!swiglu_gemm_supported(128, 64)) GTEST_SKIP() << "not an sm_90 device";
  auto rng = fresh_rng();
  const int M = 2100, m = 300, I = 512, K = 256;
  const auto x = rand_bf16(rng, static_cast<size_t>(M) * K, 1.0f);
  const auto w = rand_bf16(rng, static_cast<size_t>(2) * I * K, 1.0f / 16);
  DeviceBuffer dx = to_device<bf16>(x), dw = regrouped(w, I, K);
  DeviceBuffer all = poisoned<bf16>(static_cast<size_t>(M) * I),
               few = poisoned<bf16>(size_t(m) * I);
  swiglu_gemm(dx.get<bf16>(), dw.get<bf16>(), all.get<bf16>(), M, K, I, nullptr);
  swiglu_gemm(dx.get<bf16>(), dw.get<bf16>(), few.get<bf16>(), m, K, I, nullptr);
  EXPECT_EQ(bytes_to_host(all, size_t(m) * I * 2), bytes_to_host(few, size_t(m) * I * 2));
}

// swiglu over a gate_up whose columns come regrouped (blocks of 128 gates, then their ups) gives
// the plain layout's bits, on both kernel paths; a group that does not divide I is refused.
TEST(SwigluGemm, GroupedSwigluEqualsThePlainLayout) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  const int T = 7, I = 384, G = kSwigluGroup;
  const auto gu = rand_bf16(rng, static_cast<size_t>(T) * 2 * I, 2.0f);
  std::vector<float> grouped(gu.size());
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < I; ++i) {
      const size_t row = static_cast<size_t>(t) * 2 * I, col = (i / G) * 2 * G + i % G;
      grouped[row + col] = gu[row + i];
      grouped[row + col + G] = gu[row + I + i];
    }
  std::vector<float> want(static_cast<size_t>(T) * I);
  ref::swiglu_ref(gu.data(), want.data(), T, I, true);
  DeviceBuffer dgu = to_device<bf16>(gu), dgr = to_device<bf16>(grouped);
  for (KernelPath path : {KernelPath::Auto, KernelPath::Generic}) {
    SCOPED_TRACE(path == KernelPath::Auto ? "auto" : "generic");
    DeviceBuffer plain = poisoned<bf16>(want.size()), reg = poisoned<bf16>(want.size());
    swiglu<bf16>(dgu.get<bf16>(), plain.get<bf16>(), T, I, path, nullptr);
    swiglu<bf16>(dgr.get<bf16>(), reg.get<bf16>(), T, I, path, nullptr, G);
    CLEF_EXPECT_CLOSE(to_host<bf16>(plain, want.size()), want, 4e-3);
    EXPECT_EQ(bytes_to_host(reg, want.size() * 2), bytes_to_host(plain, want.size() * 2));
  }
  DeviceBuffer out = poisoned<bf16>(want.size());
  EXPECT_THROW(swiglu<bf16>(dgr.get<bf16>(), out.get<bf16>(), T, I, KernelPath::Auto, nullptr, 100),
               std::invalid_argument);
}

}  // namespace
}  // namespace clef

// The Hopper attention kernel's shared-memory descriptor convention (attention/flash_wgmma.h),
// probed: the kernel run with each of the four stride conventions on a small shape whose every
// convention stays inside the CTA's shared memory (with the probe's slack), against the CPU
// reference. The convention the kernel is built with (kWgmmaLayout) must be one that reproduces
// attention. The kernel's own correctness over shapes, packings and head dims is AttentionVariants'
// (it is the "wg64" / "wg128" variant there).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/flash_wgmma.h"
#include "engine/cuda/gpu_test_util.h"
#include "support/ref/attention_ref.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using namespace clef::gputest;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

TEST(WgmmaAttention, TheBuiltLayoutConventionIsTheOneThatComputesAttention) {
  CLEF_REQUIRE_GPU();
  if (!wgmma_attention_supported(64, false)) GTEST_SKIP() << "not an sm_90 device";
  std::mt19937_64 rng(20261201);
  const int T = 200, nh = 2, hd = 64;  // hd 64: every convention's addresses stay in the tiles
  std::vector<float> q = randn(rng, static_cast<size_t>(T) * nh * hd, 1.5f);
  std::vector<float> k = randn(rng, q.size()), v = randn(rng, q.size());
  for (auto* x : {&q, &k, &v}) round_all_bf16(*x);
  std::vector<double> want;
  ref::segment_attention_ref(q, k, v, {T}, nh, hd, 1.0 / std::sqrt(double(hd)), false, {}, want);
  const auto dq = to_device<bf16>(q), dk = to_device<bf16>(k), dv = to_device<bf16>(v);
  AttnSequences seqs;
  seqs.causal = false;
  int matching = 0;
  bool built_matches = false;
  std::string report;
  for (int layout = 0; layout < 4; ++layout) {
    auto out = poisoned<bf16>(q.size());
    attention_wgmma_probe(false, layout, dq.get<bf16>(), dk.get<bf16>(), dv.get<bf16>(),
                          out.get<bf16>(), T, nh, nh, hd, nullptr, &seqs);
    const std::vector<float> got = to_host<bf16>(out, q.size());
    double num = 0, den = 0;
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!std::isfinite(got[i])) {
        ++bad;
        continue;
      }
      const double d = got[i] - want[i];
      num += d * d, den += want[i] * want[i];
    }
    const double rel = std::sqrt(num / den);
    const bool ok = bad == 0 && rel < 8e-3;  // attention_variants_test's bound
    report += " layout " + std::to_string(layout) + ": rel l2 " + std::to_string(rel) + ", " +
              std::to_string(bad) + " non-finite" + (ok ? " (matches)" : "") + ";";
    if (ok && layout == kWgmmaLayout) built_matches = true;
    matching += ok;
  }
  std::printf("[wgmma layout probe]%s\n", report.c_str());
  EXPECT_GE(matching, 1) << report;
  EXPECT_TRUE(built_matches) << "built with layout " << kWgmmaLayout << ";" << report;
}

}  // namespace
}  // namespace clef

// Causal GQA attention vs a naive double implementation; RoPE tables and rotate-half vs hand
// values.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/cpu/gated_attention.h"

namespace clef {
namespace {

TEST(CausalAttention, MatchesNaiveDoubleGqa) {
  const int T = 300, nh = 6, nkv = 2, hd = 8;  // T > one 256-row query block
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(T) * nh * hd), k(static_cast<size_t>(T) * nkv * hd),
      v(k.size());
  for (auto& x : q) x = 2.0f * n(rng);
  for (auto& x : k) x = 2.0f * n(rng);
  for (auto& x : v) x = n(rng);
  std::vector<float> out(q.size(), std::nanf(""));
  engine::cpu::causal_attention(q.data(), nh * hd, k.data(), v.data(), nkv * hd, T, nh, nkv, hd,
                                out.data(), nh * hd, 2);
  double max_diff = 0;
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < nh; ++j) {
      const int kvh = j / (nh / nkv);
      std::vector<double> s(t + 1);
      double mx = -1e300;
      for (int u = 0; u <= t; ++u) {
        double dot = 0;
        for (int i = 0; i < hd; ++i)
          dot += static_cast<double>(q[(static_cast<size_t>(t) * nh + j) * hd + i]) *
                 k[(static_cast<size_t>(u) * nkv + kvh) * hd + i];
        s[u] = dot / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, s[u]);
      }
      double z = 0;
      for (auto& x : s) z += (x = std::exp(x - mx));
      for (int i = 0; i < hd; ++i) {
        double acc = 0;
        for (int u = 0; u <= t; ++u)
          acc += s[u] / z * v[(static_cast<size_t>(u) * nkv + kvh) * hd + i];
        max_diff =
            std::max(max_diff, std::fabs(acc - out[(static_cast<size_t>(t) * nh + j) * hd + i]));
      }
    }
  }
  EXPECT_LE(max_diff, 1e-5);
}

TEST(Rope, TablesAndRotateHalf) {
  std::vector<float> c, s;
  const double theta = 10000.0;
  engine::cpu::rope_tables(3, 4, theta, c, s);  // rd = 4: inv_freq = {1, 1/100}
  ASSERT_EQ(c.size(), 6u);
  EXPECT_FLOAT_EQ(c[0], 1.0f);
  EXPECT_FLOAT_EQ(s[0], 0.0f);
  EXPECT_NEAR(c[2 * 2 + 0], std::cos(2.0), 1e-7);
  EXPECT_NEAR(s[2 * 2 + 1], std::sin(0.02), 1e-7);
  // head_dim 6, rotary dims 4: pairs (0, 2) and (1, 3); dims 4, 5 pass through.
  float x[6] = {1, 2, 3, 4, 5, 6};
  engine::cpu::apply_rope(x, 1, 6, 4, &c[2 * 2], &s[2 * 2]);
  EXPECT_NEAR(x[0], 1 * std::cos(2.0) - 3 * std::sin(2.0), 1e-6);
  EXPECT_NEAR(x[2], 3 * std::cos(2.0) + 1 * std::sin(2.0), 1e-6);
  EXPECT_NEAR(x[1], 2 * std::cos(0.02) - 4 * std::sin(0.02), 1e-6);
  EXPECT_NEAR(x[3], 4 * std::cos(0.02) + 2 * std::sin(0.02), 1e-6);
  EXPECT_EQ(x[4], 5.0f);
  EXPECT_EQ(x[5], 6.0f);
}

}  // namespace
}  // namespace clef

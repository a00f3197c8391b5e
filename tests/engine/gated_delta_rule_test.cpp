// The sequential gated delta rule vs a direct double-precision transcription of docs/spec/model.md
// §3's recurrence on random inputs, with GQA-style ratio 3 (value head h reads key head h / 3).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/cpu/gated_deltanet.h"

namespace clef {
namespace {

struct Inputs {
  int T, Hk, Hv, dk, dv;
  std::vector<float> q, k, v, g, beta;
};

Inputs random_inputs(int T, int Hk, int Hv, int dk, int dv, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Inputs in{T, Hk, Hv, dk, dv, {}, {}, {}, {}, {}};
  auto unit = [&](std::vector<float>& x, float scale) {
    x.resize(static_cast<size_t>(T) * Hk * dk);
    for (size_t r = 0; r < x.size() / dk; ++r) {
      double ss = 0;
      for (int i = 0; i < dk; ++i) ss += std::pow(x[r * dk + i] = n(rng), 2);
      for (int i = 0; i < dk; ++i)
        x[r * dk + i] = static_cast<float>(x[r * dk + i] / std::sqrt(ss) * scale);
    }
  };
  unit(in.q, 1.0f / std::sqrt(static_cast<float>(dk)));
  unit(in.k, 1.0f);
  in.v.resize(static_cast<size_t>(T) * Hv * dv);
  for (auto& x : in.v) x = n(rng);
  in.g.resize(static_cast<size_t>(T) * Hv);
  in.beta.resize(in.g.size());
  for (auto& x : in.g) x = -2.0f * u(rng);  // log decay in (-2, 0]
  for (auto& x : in.beta) x = u(rng);
  return in;
}

std::vector<double> naive(const Inputs& in) {
  const int r = in.Hv / in.Hk;
  std::vector<double> o(static_cast<size_t>(in.T) * in.Hv * in.dv);
  for (int h = 0; h < in.Hv; ++h) {
    const int kh = h / r;
    std::vector<double> S(static_cast<size_t>(in.dk) * in.dv, 0.0);
    for (int t = 0; t < in.T; ++t) {
      const float* q = &in.q[(static_cast<size_t>(t) * in.Hk + kh) * in.dk];
      const float* k = &in.k[(static_cast<size_t>(t) * in.Hk + kh) * in.dk];
      const float* v = &in.v[(static_cast<size_t>(t) * in.Hv + h) * in.dv];
      const double decay = std::exp(static_cast<double>(in.g[static_cast<size_t>(t) * in.Hv + h]));
      const double beta = in.beta[static_cast<size_t>(t) * in.Hv + h];
      for (auto& s : S) s *= decay;
      for (int j = 0; j < in.dv; ++j) {
        double stk = 0;
        for (int i = 0; i < in.dk; ++i) stk += S[static_cast<size_t>(i) * in.dv + j] * k[i];
        const double delta = beta * (v[j] - stk);
        for (int i = 0; i < in.dk; ++i) S[static_cast<size_t>(i) * in.dv + j] += k[i] * delta;
      }
      for (int j = 0; j < in.dv; ++j) {
        double acc = 0;
        for (int i = 0; i < in.dk; ++i) acc += S[static_cast<size_t>(i) * in.dv + j] * q[i];
        o[(static_cast<size_t>(t) * in.Hv + h) * in.dv + j] = acc;
      }
    }
  }
  return o;
}

void check(int T, int Hk, int Hv, int dk, int dv, int threads, unsigned seed) {
  const Inputs in = random_inputs(T, Hk, Hv, dk, dv, seed);
  std::vector<float> o(static_cast<size_t>(T) * Hv * dv, std::nanf(""));
  engine::cpu::gated_delta_rule(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                                T, Hk, Hv, dk, dv, o.data(), threads);
  const std::vector<double> ref = naive(in);
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(o[i])) << i;
    max_diff = std::max(max_diff, std::fabs(o[i] - ref[i]));
    max_ref = std::max(max_ref, std::fabs(ref[i]));
  }
  EXPECT_GT(max_ref, 0.1);
  EXPECT_LE(max_diff, 1e-5 * max_ref) << "max diff " << max_diff;
}

TEST(GatedDeltaRule, MatchesNaiveDoubleRatio3) {
  check(200, 2, 6, 16, 8, 2, 1);
}
TEST(GatedDeltaRule, MatchesNaiveDoubleRatio2SingleThread) {
  check(97, 3, 6, 8, 12, 1, 2);
}
TEST(GatedDeltaRule, MatchesNaiveDoubleRatio1) {
  check(33, 4, 4, 5, 7, 3, 3);
}

TEST(GatedDeltaRule, RefusesNonIntegerRatio) {
  std::vector<float> x(64, 0.0f);
  EXPECT_THROW(engine::cpu::gated_delta_rule(x.data(), x.data(), x.data(), x.data(), x.data(), 1, 2,
                                             3, 2, 2, x.data(), 1),
               std::runtime_error);
}

TEST(GatedDeltaRule, FirstTokenIsBetaTimesVTimesQDotK) {
  // One token from a zero state: S = k (beta v)^T, so o = beta * (k . q) * v.
  const float q[2] = {0.6f, 0.8f}, k[2] = {1.0f, 0.0f}, v[3] = {1.0f, -2.0f, 4.0f};
  const float g[1] = {-0.5f}, beta[1] = {0.25f};
  float o[3];
  engine::cpu::gated_delta_rule(q, k, v, g, beta, 1, 1, 1, 2, 3, o, 1);
  EXPECT_FLOAT_EQ(o[0], 0.25f * 0.6f * 1.0f);
  EXPECT_FLOAT_EQ(o[1], 0.25f * 0.6f * -2.0f);
  EXPECT_FLOAT_EQ(o[2], 0.25f * 0.6f * 4.0f);
}

}  // namespace
}  // namespace clef

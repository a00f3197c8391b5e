// The float32 building blocks against hand-computed values.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/cpu/linear.h"
#include "engine/cpu/ops.h"

namespace clef {
namespace {

using namespace engine::cpu;

TEST(Ops, ActivationsMatchKnownValues) {
  EXPECT_NEAR(gelu_erff(1.0f), 0.8413447460685429, 1e-7);  // Phi(1)
  EXPECT_NEAR(gelu_erff(-2.0f), -2.0 * 0.022750131948179195, 1e-7);
  EXPECT_NEAR(siluf(2.0f), 2.0 / (1.0 + std::exp(-2.0)), 1e-7);
  EXPECT_NEAR(softplusf(0.0f), std::log(2.0), 1e-7);
  EXPECT_EQ(softplusf(25.0f), 25.0f);  // PyTorch threshold 20: identity above it
  EXPECT_NEAR(sigmoidf(0.0f), 0.5, 0);
}

TEST(Ops, RmsNormOnePlusWeight) {
  const float x[2] = {3.0f, 4.0f}, w[2] = {0.0f, 1.0f};
  float y[2];
  rms_norm_1p(x, w, 0.0f, 1, 2, y);  // rms = sqrt(12.5)
  EXPECT_NEAR(y[0], 3.0 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[1], 2.0 * 4.0 / std::sqrt(12.5), 1e-6);
}

TEST(Ops, LayerNormBiasedVariance) {
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 1}, b[4] = {0, 0, 0, 1};
  float y[4];
  layer_norm(x, w, b, 0.0f, 1, 4, y);  // mean 2.5, var 1.25
  const double s = std::sqrt(1.25);
  EXPECT_NEAR(y[0], -1.5 / s, 1e-6);
  EXPECT_NEAR(y[2], 2 * 0.5 / s, 1e-6);
  EXPECT_NEAR(y[3], 1.5 / s + 1, 1e-6);
}

TEST(Ops, SoftmaxIsStable) {
  float x[3] = {1000.0f, 1000.0f, -1000.0f};
  softmax_inplace(x, 3);
  EXPECT_FLOAT_EQ(x[0], 0.5f);
  EXPECT_FLOAT_EQ(x[1], 0.5f);
  EXPECT_FLOAT_EQ(x[2], 0.0f);
}

uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);  // exact for values with <= 8 significant bits
}

TEST(Linear, Bf16WeightsRowRangeAndBias) {
  // W [3, 2] bf16 = {{1, 2}, {-0.5, 0.25}, {4, -8}}; x [2, 2].
  const float wf[6] = {1, 2, -0.5f, 0.25f, 4, -8};
  std::vector<uint16_t> wb(6);
  for (int i = 0; i < 6; ++i) wb[i] = bf16_bits(wf[i]);
  model::Tensor w;
  w.name = "w";
  w.dtype = model::DType::BF16;
  w.shape = {3, 2};
  w.data = reinterpret_cast<const uint8_t*>(wb.data());
  w.nbytes = wb.size() * 2;
  const float x[4] = {1, 1, 2, -1};
  const std::vector<float> y = linear(w, x, 2);
  ASSERT_EQ(y.size(), 6u);
  EXPECT_FLOAT_EQ(y[0], 3);
  EXPECT_FLOAT_EQ(y[1], -0.25f);
  EXPECT_FLOAT_EQ(y[2], -4);
  EXPECT_FLOAT_EQ(y[3], 0);
  EXPECT_FLOAT_EQ(y[4], -1.25f);
  EXPECT_FLOAT_EQ(y[5], 16);
  // Rows [1, 3) only, with a bias, into a strided output.
  float out[2 * 3] = {};
  const float bias[2] = {10, 20};
  linear(w, x, 2, 2, out, 3, bias, 1, 2);
  EXPECT_FLOAT_EQ(out[0], 9.75f);
  EXPECT_FLOAT_EQ(out[1], 16);
  EXPECT_FLOAT_EQ(out[3], 8.75f);
  EXPECT_FLOAT_EQ(out[4], 36);
  EXPECT_THROW(linear(w, x, 2, 2, out, 3, nullptr, 2, 2), std::runtime_error);
}

// A weight of two 16 MiB conversion blocks (2048 + 952 rows of 2048) converted on four threads:
// small integers, so every product and sum is exact in float32 whatever the summation order, and
// each output must equal the integer dot product. A row converted from the wrong place, or left
// unconverted, shows.
TEST(Linear, ManyBlocksOnSeveralThreadsExact) {
  constexpr int kOut = 3000, kIn = 2048, kRows = 3;
  std::vector<uint16_t> wb(size_t(kOut) * kIn);
  auto wv = [](int o, int k) { return (o * 7 + k * 3) % 17 - 8; };
  auto xv = [](int t, int k) { return ((t + 1) * k) % 5 - 2; };
  for (int o = 0; o < kOut; ++o)
    for (int k = 0; k < kIn; ++k) wb[size_t(o) * kIn + k] = bf16_bits(float(wv(o, k)));
  model::Tensor w;
  w.name = "w";
  w.dtype = model::DType::BF16;
  w.shape = {kOut, kIn};
  w.data = reinterpret_cast<const uint8_t*>(wb.data());
  w.nbytes = wb.size() * 2;
  std::vector<float> x(size_t(kRows) * kIn);
  for (int t = 0; t < kRows; ++t)
    for (int k = 0; k < kIn; ++k) x[size_t(t) * kIn + k] = float(xv(t, k));
  const int saved = openblas_get_num_threads();
  openblas_set_num_threads(4);  // the conversion takes the GEMM's thread count
  const std::vector<float> y = linear(w, x.data(), kRows);
  openblas_set_num_threads(saved);
  ASSERT_EQ(y.size(), size_t(kRows) * kOut);
  size_t wrong = 0;
  for (int t = 0; t < kRows; ++t)
    for (int o = 0; o < kOut; ++o) {
      int64_t want = 0;
      for (int k = 0; k < kIn; ++k) want += int64_t{wv(o, k)} * xv(t, k);
      wrong += y[size_t(t) * kOut + o] != float(want);
    }
  EXPECT_EQ(wrong, 0u);
}

}  // namespace
}  // namespace clef

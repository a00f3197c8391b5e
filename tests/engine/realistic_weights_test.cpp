// make-model --weights realistic: the activations feeding the projections have the outlier-channel
// statistics of trained LLMs (a few channels 20-100x the median), Gaussian weights have none; the
// numbers printed here are the ones docs/engine.md quotes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/cpu/backbone.h"
#include "engine/golden_models.h"
#include "model/make_model.h"
#include "support/scratch_dir.h"

namespace clef {
namespace {

struct Stats {
  double max_over_median = 0;  // per-channel RMS over tokens: max / median (worst layer)
  double kurtosis = 0;         // of all projection-input values (mean over layers)
  double hidden_rms_last = 0;  // residual stream RMS after the last layer
};

Stats measure(const std::string& dir) {
  auto release = model::Release::load(dir);
  const auto records = testing::load_golden("tiny-r2");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < 6 && i < records.size(); ++i) {
    const auto req = encoding::validate_request(records[i].request);
    const auto enc = encoding::encode_request(req, *release->tokenizer,
                                              testing::golden_encode_options(records[i]));
    ids.insert(ids.end(), enc.input_ids.begin(), enc.input_ids.end());
  }
  std::vector<std::vector<float>> hidden;
  engine::cpu::run_backbone(*release, ids, 0, &hidden);
  const int H = release->text.hidden_size, T = static_cast<int>(ids.size());
  const int L = release->text.num_hidden_layers;
  Stats s;
  for (int l = 0; l < L; ++l) {  // input of layer l = RMSNorm(h_l) * (1 + w)
    const auto w =
        release->backbone("layers." + std::to_string(l) + ".input_layernorm.weight").to_float();
    std::vector<double> ch(H, 0.0);
    double m2 = 0, m4 = 0;
    for (int t = 0; t < T; ++t) {
      const float* h = hidden[l].data() + static_cast<size_t>(t) * H;
      double ss = 0;
      for (int c = 0; c < H; ++c) ss += static_cast<double>(h[c]) * h[c];
      const double inv = 1.0 / std::sqrt(ss / H + release->text.rms_norm_eps);
      for (int c = 0; c < H; ++c) {
        const double x = h[c] * inv * (1.0 + w[c]);
        ch[c] += x * x;
        m2 += x * x;
        m4 += x * x * x * x;
      }
    }
    std::vector<double> rms(H);
    for (int c = 0; c < H; ++c) rms[c] = std::sqrt(ch[c] / T);
    std::vector<double> sorted = rms;
    std::nth_element(sorted.begin(), sorted.begin() + H / 2, sorted.end());
    s.max_over_median =
        std::max(s.max_over_median, *std::max_element(rms.begin(), rms.end()) / sorted[H / 2]);
    const double n = static_cast<double>(T) * H;
    s.kurtosis += (m4 / n) / ((m2 / n) * (m2 / n)) / L;
  }
  double ss = 0;
  for (float v : hidden[L - 1]) ss += static_cast<double>(v) * v;
  s.hidden_rms_last = std::sqrt(ss / hidden[L - 1].size());
  return s;
}

TEST(RealisticWeights, ProjectionInputsHaveOutlierChannelsGaussianOnesDoNot) {
  clef::testing::ScratchDir tmp;
  model::MakeModelOptions o;
  o.seed = 3;
  o.out_dir = tmp / "gaussian";
  model::make_model(o);
  const Stats g = measure(o.out_dir);
  o.weights = "realistic";
  o.out_dir = tmp / "realistic";
  model::make_model(o);
  const Stats r = measure(o.out_dir);
  std::printf("gaussian: max/median channel RMS %.1f, kurtosis %.1f, residual RMS %.3g\n",
              g.max_over_median, g.kurtosis, g.hidden_rms_last);
  std::printf("realistic: max/median channel RMS %.1f, kurtosis %.1f, residual RMS %.3g\n",
              r.max_over_median, r.kurtosis, r.hidden_rms_last);
  EXPECT_LT(g.max_over_median, 4.0);
  EXPECT_GE(r.max_over_median, 20.0);
  EXPECT_LE(r.max_over_median, 200.0);
  EXPECT_GT(r.kurtosis, 10.0);
  EXPECT_TRUE(std::isfinite(r.hidden_rms_last));
}

}  // namespace
}  // namespace clef

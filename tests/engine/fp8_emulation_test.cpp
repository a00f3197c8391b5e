// The CPU FP8 emulation (engine/cpu/fp8_emulation.h), the oracle for what FP8 itself does to the
// answers of the FP8 CUDA engine: exact on values e4m3 represents, the e4m3 rounding bound
// otherwise, blocks where the CUDA quantisers put them; and on the golden tiny models, how far FP8
// at the five GEMM inputs moves the probabilities next to the reference's own bf16 run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "answer/answer.h"
#include "engine/cpu/cpu_engine.h"
#include "engine/cpu/fp8_emulation.h"
#include "engine/golden_models.h"
#include "model/bf16.h"
#include "model/fp8.h"

namespace clef {
namespace {

using engine::cpu::fp8_emulate_rows;
using engine::cpu::fp8_emulate_weight_blocks;

TEST(Fp8Emulation, RowsKeepValuesE4m3RepresentsAtTheirScale) {
  // Row amax 448 * 2^-4 -> scale 2^-4; every value a code times the scale: unchanged.
  std::vector<float> x = {28.0f, -0.5f, 0.0f, 1.75f, -28.0f, 0.125f};
  const std::vector<float> want = x;
  fp8_emulate_rows(x.data(), 1, 6, 6);
  EXPECT_EQ(x, want);
}

TEST(Fp8Emulation, RowsRoundToE4m3PerBlockOf128Channels) {
  // Two 128-channel blocks with different amax: each gets its own scale (amax / 448), so the
  // small block keeps its relative precision.
  std::vector<float> x(256);
  for (int c = 0; c < 128; ++c) x[c] = 100.0f + 0.37f * c;
  for (int c = 128; c < 256; ++c) x[c] = 1e-3f * (1.0f + 0.01f * (c - 128));
  const std::vector<float> orig = x;
  fp8_emulate_rows(x.data(), 1, 256, 256);
  int changed = 0;
  for (int c = 0; c < 256; ++c) {
    const float xb = model::round_to_bf16(orig[c]);
    // e4m3 normal numbers: 3 mantissa bits, so |rounding error| <= 2^-4 relative.
    EXPECT_LE(std::fabs(x[c] - xb), std::ldexp(std::fabs(xb), -4) * 1.0001f) << c;
    changed += x[c] != xb;
  }
  EXPECT_GT(changed, 100);
  EXPECT_EQ(x[127], model::round_to_bf16(orig[127]));  // the amax maps to 448 exactly
  EXPECT_EQ(x[255], model::round_to_bf16(orig[255]));
}

TEST(Fp8Emulation, RowsAreBf16RoundedFirstAndZeroRowsStayZero) {
  // The producers store bf16 and quantise that: 1 + 2^-9 rounds to 1 in bf16 (and 448 * s = 1).
  std::vector<float> x = {1.0f + std::ldexp(1.0f, -9), 0.0f, 0.0f, 0.0f};
  fp8_emulate_rows(x.data(), 2, 2, 2);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_EQ(x[3], 0.0f);
}

TEST(Fp8Emulation, WeightBlocksAre128By128FromTheTensorOrigin) {
  // [200, 160]: blocks rows [0,128) x [128,200), columns [0,128) x [128,160). One large value per
  // block sets that block's scale only.
  const int n = 200, k = 160;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(n) * k);
  for (float& v : w) v = model::round_to_bf16(u(rng));
  w[0] = 300.0f;  // block (0, 0): scale 300/448, small values lose their precision there
  const std::vector<float> orig = w;
  fp8_emulate_weight_blocks(w.data(), n, k);
  double err00 = 0, err11 = 0;
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; ++c) {
      const double e = std::fabs(w[size_t(r) * k + c] - orig[size_t(r) * k + c]);
      if (r < 128 && c < 128) err00 = std::max(err00, e);
      if (r >= 128 && c >= 128) err11 = std::max(err11, e);
    }
  EXPECT_EQ(w[0], 300.0f);
  // Block (1, 1)'s scale is its own amax (<= 1) / 448: error <= 2^-4; block (0, 0)'s values
  // below 1 fall to e4m3 codes of 300/448: error up to half a step of the low binades.
  EXPECT_LE(err11, 1.0 / 16 * 1.0001);
  EXPECT_GT(err00, err11);
}


struct Deviation {
  double p = 0, ref_bf16_p = 0;
  int flips = 0, questions = 0;
};

template <typename At>
size_t argmax(size_t n, At at) {
  size_t b = 0;
  for (size_t j = 1; j < n; ++j)
    if (at(j) > at(b)) b = j;
  return b;
}

Deviation emulated_deviation(const std::string& name) {
  auto release = testing::load_golden_model(name);
  engine::cpu::CpuEngine eng(release, 1, engine::cpu::GemmInputs::Fp8Emulated);
  EXPECT_EQ(eng.info().dtype, "fp8-emulated");
  const auto records = testing::load_golden(name);
  const auto bf16 = testing::load_reference_bf16(name);
  EXPECT_EQ(records.size(), bf16.size());
  Deviation d;
  for (size_t n = 0; n < records.size(); ++n) {
    const auto& r = records[n];
    const auto enc =
        encoding::encode_request(encoding::validate_request(r.request), *release->tokenizer,
                                 testing::golden_encode_options(r));
    const auto outs = eng.forward({&enc});
    for (size_t k = 0; k < enc.questions.size(); ++k) {
      const auto& q = enc.questions[k];
      const auto p = answer::softmax_f32(outs.at(0).logits.at(k));
      auto pref = [&](size_t j) { return r.probabilities.at(q.id).at(q.option_ids[j]); };
      d.flips += argmax(p.size(), [&](size_t j) { return p[j]; }) != argmax(p.size(), pref);
      ++d.questions;
      for (size_t j = 0; j < p.size(); ++j) {
        d.p = std::max(d.p, std::fabs(p[j] - pref(j)));
        d.ref_bf16_p =
            std::max(d.ref_bf16_p, std::fabs(bf16[n].at(q.id).at(q.option_ids[j]) - pref(j)));
      }
    }
  }
  std::printf(
      "%s fp8-emulated (cpu): %zu requests, %d questions, max |dp| %.4g (reference_bf16 "
      "%.4g), argmax flips %d\n",
      name.c_str(), records.size(), d.questions, d.p, d.ref_bf16_p, d.flips);
  return d;
}

// FP8 (3 mantissa bits) rounds 16x coarser than bf16 (7): on these random tiny models, which
// amplify small changes (reference_bf16 already moves probabilities by 0.01-0.05), FP8 at the
// GEMM inputs alone moves them several times the reference's bf16 noise. A bound of 3x
// reference_bf16 for the FP8 engine is therefore not reachable by any correct FP8 engine; the GPU
// test compares with this emulation instead. Bounds here: FP8 moves them (the emulation is on),
// and not to noise (the model still answers: most argmaxes stay).
TEST(Fp8Emulation, GoldenTinyModelsMoveWellBeyondBf16NoiseButStayAnswers) {
  for (const char* m : {"tiny-r2", "tiny-r3"}) {
    const Deviation d = emulated_deviation(m);
    EXPECT_GT(d.ref_bf16_p, 0.0);
    EXPECT_GT(d.p, 3.0 * d.ref_bf16_p) << m;
    EXPECT_LT(d.p, 0.9) << m;
    EXPECT_LT(2 * d.flips, d.questions) << m;
  }
}

}  // namespace
}  // namespace clef

// CPU float32 engine vs the reference's float32 run on the golden tiny models: every request's
// logits within 1e-3 and probabilities within 1e-4, same input length.
#include <gtest/gtest.h>

#include <cmath>

#include "answer/answer.h"
#include "engine/cpu/cpu_engine.h"
#include "engine/engine.h"
#include "engine/golden_models.h"

namespace clef {
namespace {

void check_model(const std::string& name) {
  auto release = testing::load_golden_model(name);
  engine::EngineOptions eo;
  eo.device = engine::Device::Cpu;
  auto eng = engine::create_engine(release, eo);
  const auto records = testing::load_golden(name);
  ASSERT_FALSE(records.empty());
  double worst_p = 0.0, worst_logit = 0.0;
  for (const auto& r : records) {
    SCOPED_TRACE(name + " line " + std::to_string(r.line));
    const auto req = encoding::validate_request(r.request);
    const auto enc =
        encoding::encode_request(req, *release->tokenizer, testing::golden_encode_options(r));
    ASSERT_EQ(static_cast<int64_t>(enc.input_ids.size()), r.input_tokens);
    const auto outs = eng->forward({&enc});
    ASSERT_EQ(outs.size(), 1u);
    const auto& logits = outs[0].logits;
    ASSERT_EQ(logits.size(), enc.questions.size());
    for (size_t k = 0; k < enc.questions.size(); ++k) {
      const auto& q = enc.questions[k];
      const auto& ref_logits = r.logits.at(q.id);
      ASSERT_EQ(logits[k].size(), ref_logits.size()) << q.id;
      const std::vector<float> p = answer::softmax_f32(logits[k]);
      for (size_t j = 0; j < ref_logits.size(); ++j) {
        const double dl = std::fabs(logits[k][j] - ref_logits[j]);
        const double dp = std::fabs(p[j] - r.probabilities.at(q.id).at(q.option_ids[j]));
        worst_logit = std::max(worst_logit, dl);
        worst_p = std::max(worst_p, dp);
        EXPECT_LE(dl, 1e-3) << q.id << " option " << q.option_ids[j];
        EXPECT_LE(dp, 1e-4) << q.id << " option " << q.option_ids[j];
      }
    }
  }
  std::printf("%s: %zu requests, max |dlogit| %.3g, max |dp| %.3g\n", name.c_str(), records.size(),
              worst_logit, worst_p);
}

TEST(CpuEngineGolden, TinyR2MatchesReferenceFp32) {
  check_model("tiny-r2");
}
TEST(CpuEngineGolden, TinyR3MatchesReferenceFp32) {
  check_model("tiny-r3");
}

TEST(CpuEngineGolden, InfoSaysFloat32Cpu) {
  auto eng = engine::create_engine(testing::load_golden_model("tiny-r2"), {});
  const auto info = eng->info();
  EXPECT_EQ(info.backend, "cpu");
  EXPECT_EQ(info.dtype, "float32");
}

TEST(CpuEngineGolden, RefusesOtherDtypesAndUnknownDevices) {
  auto release = testing::load_golden_model("tiny-r2");
  engine::EngineOptions eo;
  eo.dtype = engine::DType::BFloat16;
  EXPECT_THROW(engine::create_engine(release, eo), std::runtime_error);
  eo.dtype = engine::DType::FP8;  // FP8 releases run as they are, in float32
  try {
    engine::create_engine(release, eo);
    ADD_FAILURE() << "--dtype fp8 accepted on cpu";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("dequantised to float32"), std::string::npos) << e.what();
  }
  eo.dtype = engine::DType::Fp8Emulated;  // the FP8 oracle: float32 on FP8-rounded inputs
  EXPECT_EQ(engine::create_engine(release, eo)->info().dtype, "fp8-emulated");
  eo.dtype = engine::DType::Default;
  eo.device = static_cast<engine::Device>(7);  // no such device
  EXPECT_THROW(engine::create_engine(release, eo), std::runtime_error);
}

TEST(CpuEngineGolden, OutOfVocabularyIdIsAnErrorNotACrash) {
  auto release = testing::load_golden_model("tiny-r2");
  engine::cpu::CpuEngine eng(release, 1);
  encoding::EncodedRequest enc;
  enc.input_ids = {1, 2, static_cast<int32_t>(release->text.vocab_size)};
  EXPECT_THROW(eng.run(enc), std::runtime_error);
}

TEST(CpuEngineGolden, EmptySpanIsRefused) {
  auto release = testing::load_golden_model("tiny-r2");
  engine::cpu::CpuEngine eng(release, 1);
  encoding::EncodedRequest enc;
  enc.input_ids = {1, 2, 3, 4};
  encoding::EncodedQuestion q;
  q.id = "q";
  q.question_span = {1, 1};
  q.option_spans = {{2, 3}, {3, 4}};
  q.option_ids = {"true", "false"};
  enc.questions.push_back(q);
  EXPECT_THROW(eng.run(enc), std::runtime_error);
  enc.questions[0].question_span = {1, 2};
  enc.questions[0].option_spans[1] = {3, 9};  // past the end of the input
  EXPECT_THROW(eng.run(enc), std::runtime_error);
  enc.questions[0].option_spans[1] = {3, 4};
  EXPECT_NO_THROW(eng.run(enc));
}

}  // namespace
}  // namespace clef

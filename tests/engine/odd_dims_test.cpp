// A random model with dimensions unlike the fixtures (GDN ratio 3, conv kernel 3, head width >
// hidden size, odd head counts): the engine must not assume tiny-r2's sizes. No reference exists
// for it, so this checks properties that a wrong index would break: causality of the backbone,
// finite logits, probabilities summing to one, and answers independent of the batch.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "answer/answer.h"
#include "engine/cpu/backbone.h"
#include "engine/cpu/cpu_engine.h"
#include "engine/golden_models.h"
#include "model/bf16.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/tensor_specs.h"

namespace clef {
namespace {

namespace fs = std::filesystem;

void write_random(const std::string& path, const std::vector<model::TensorSpec>& specs,
                  const std::string& prefix, unsigned seed) {
  std::vector<model::TensorSpec> named = specs;
  for (auto& s : named)
    if (s.name != "lm_head.weight") s.name = prefix + s.name;
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.3f);
  std::vector<std::vector<uint16_t>> data;
  for (const auto& s : named) {
    std::vector<uint16_t> d(s.nbytes() / 2);
    for (auto& x : d) x = model::float_to_bf16(n(rng));
    data.push_back(std::move(d));
  }
  model::write_safetensors(
      path, named, {{"format", "pt"}}, [&](size_t i, size_t off, uint8_t* dst, size_t len) {
        std::memcpy(dst, reinterpret_cast<const uint8_t*>(data[i].data()) + off, len);
      });
}

std::string make_odd_release() {
  const std::string dir = ::testing::TempDir() + "clef-odd-dims-" + std::to_string(getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string src = testing::golden_dir() + "/tiny-r3";
  fs::copy_file(src + "/tokenizer.json", dir + "/tokenizer.json");
  fs::copy_file(src + "/tokenizer_config.json", dir + "/tokenizer_config.json");
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(src + "/config.json"));
  auto& t = cfg["text_config"];
  t["hidden_size"] = 40;
  t["intermediate_size"] = 72;
  t["num_hidden_layers"] = 5;
  t["layer_types"] = {"linear_attention", "full_attention", "linear_attention", "linear_attention",
                      "full_attention"};
  t["num_attention_heads"] = 6;
  t["num_key_value_heads"] = 3;
  t["head_dim"] = 24;
  t["linear_num_key_heads"] = 3;
  t["linear_num_value_heads"] = 9;
  t["linear_key_head_dim"] = 12;
  t["linear_value_head_dim"] = 10;
  t["linear_conv_kernel_dim"] = 3;
  t["mrope_section"] = {1, 1, 1};  // rotary dims 6 = 2 * (1 + 1 + 1)
  t["rope_parameters"]["mrope_section"] = {1, 1, 1};
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  nlohmann::json head = {{"hidden_size", 40}, {"width", 48}, {"routing_layers", 1},
                         {"layers", 2},       {"heads", 3},  {"feedforward", 20}};
  std::ofstream(dir + "/joint_head_config.json") << head.dump();
  const auto bc = model::parse_backbone_config(cfg.dump(), dir + "/config.json");
  write_random(dir + "/model.safetensors", model::backbone_tensor_specs(bc.text),
               "model.language_model.", 1);
  write_random(
      dir + "/joint_head.safetensors",
      model::head_tensor_specs(model::parse_head_config(head.dump(), "joint_head_config.json")), "",
      2);
  return dir;
}

TEST(CpuEngineOddDims, CausalFiniteAndBatchIndependent) {
  const auto release = model::Release::load(make_odd_release());
  ASSERT_EQ(release->text.linear_num_value_heads / release->text.linear_num_key_heads, 3);
  const int H = release->text.hidden_size;

  const auto records = testing::load_golden("tiny-r3");
  const auto req = encoding::validate_request(records[3].request);
  const auto enc = encoding::encode_request(req, *release->tokenizer,
                                            testing::golden_encode_options(records[3]));
  const int T = static_cast<int>(enc.input_ids.size());

  // Causality: the first P positions do not depend on what follows them.
  const std::vector<float> full = engine::cpu::run_backbone(*release, enc.input_ids, 2);
  const int P = T / 3;
  const std::vector<int32_t> prefix(enc.input_ids.begin(), enc.input_ids.begin() + P);
  const std::vector<float> part = engine::cpu::run_backbone(*release, prefix, 1);
  double max_diff = 0, scale = 0;
  for (size_t i = 0; i < part.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(part[i]) - full[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(full[i])));
  }
  EXPECT_LE(max_diff, 1e-4 * scale);
  EXPECT_EQ(full.size(), static_cast<size_t>(T) * H);

  engine::cpu::CpuEngine eng(release, 2);
  const auto alone = eng.forward({&enc});
  const auto other =
      encoding::encode_request(encoding::validate_request(records[4].request), *release->tokenizer,
                               testing::golden_encode_options(records[4]));
  const auto batch = eng.forward({&other, &enc});
  ASSERT_EQ(batch.size(), 2u);
  ASSERT_EQ(alone[0].logits.size(), enc.questions.size());
  for (size_t k = 0; k < enc.questions.size(); ++k) {
    EXPECT_EQ(alone[0].logits[k], batch[1].logits[k]);
    ASSERT_EQ(alone[0].logits[k].size(), enc.questions[k].option_ids.size());
    double sum = 0;
    for (float p : answer::softmax_f32(alone[0].logits[k])) {
      ASSERT_TRUE(std::isfinite(p));
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

}  // namespace
}  // namespace clef

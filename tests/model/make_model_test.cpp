// make-model: the presets' dimensions, tiny round trips through Release::load with HF-style init,
// determinism per seed (also across thread counts and shards), and the CLI.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "media/media_config.h"
#include "model/make_model.h"
#include "model/pinning.h"
#include "model/tensor_specs.h"
#include "model_test_util.h"

namespace clef::model {
namespace {

using testing::ScratchDir;

std::string make(const ScratchDir& tmp, const std::string& name, MakeModelOptions o) {
  o.out_dir = tmp / name;
  make_model(o);
  return o.out_dir;
}

struct Stats {
  double mean = 0, sd = 0, min = 1e30, max = -1e30;
};

Stats stats(const Tensor& t) {
  std::vector<float> v = t.to_float();
  Stats s;
  for (float x : v) {
    s.mean += x;
    s.min = std::min<double>(s.min, x);
    s.max = std::max<double>(s.max, x);
  }
  s.mean /= static_cast<double>(v.size());
  for (float x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = std::sqrt(s.sd / static_cast<double>(v.size()));
  return s;
}

TEST(MakeModel, PresetsHaveTheSpecDimensions) {
  // docs/spec/model.md §2 (Clef-flash / Clef columns) and §1 (head).
  ModelPreset f = make_model_preset("flash");
  EXPECT_EQ(f.text.hidden_size, 4096);
  EXPECT_EQ(f.text.num_hidden_layers, 32);
  EXPECT_EQ(f.text.intermediate_size, 12288);
  EXPECT_EQ(f.text.num_attention_heads, 16);
  EXPECT_EQ(f.text.num_key_value_heads, 4);
  EXPECT_EQ(f.text.head_dim, 256);
  EXPECT_EQ(f.text.linear_num_key_heads, 16);
  EXPECT_EQ(f.text.linear_num_value_heads, 32);
  EXPECT_EQ(f.text.linear_key_head_dim, 128);
  EXPECT_EQ(f.text.linear_value_head_dim, 128);
  EXPECT_EQ(f.text.vocab_size, 248320);
  EXPECT_EQ(f.head.hidden_size, 4096);
  EXPECT_EQ(f.head.width, 1024);
  EXPECT_EQ(f.head.routing_layers, 2);
  EXPECT_EQ(f.head.layers, 4);
  EXPECT_EQ(f.head.heads, 16);
  EXPECT_EQ(f.head.feedforward, 4096);
  ModelPreset c = make_model_preset("clef");
  EXPECT_EQ(c.text.hidden_size, 5120);
  EXPECT_EQ(c.text.num_hidden_layers, 64);
  EXPECT_EQ(c.text.intermediate_size, 17408);
  EXPECT_EQ(c.text.num_attention_heads, 24);
  EXPECT_EQ(c.text.num_key_value_heads, 4);
  EXPECT_EQ(c.text.linear_num_value_heads, 48);
  EXPECT_EQ(c.text.vocab_size, 248320);
  EXPECT_EQ(c.head.hidden_size, 5120);
  for (const ModelPreset& p : {f, c, make_model_preset("small"), make_model_preset("tiny")}) {
    for (size_t i = 0; i < p.text.layer_types.size(); ++i) {
      EXPECT_EQ(p.text.layer_types[i],
                i % 4 == 3 ? LayerType::FullAttention : LayerType::LinearAttention);
    }
  }
  EXPECT_THROW(make_model_preset("huge"), std::invalid_argument);
}

// The real presets' towers are Qwen3.5's (docs/spec/media.md §7): 27 blocks, width 1152, MLP 4304,
// 16 heads x 72, a 48 x 48 position table, output the backbone's width.
TEST(MakeModel, PresetVisionTowers) {
  for (const char* name : {"flash", "clef"}) {
    const ModelPreset p = make_model_preset(name);
    const VisionConfig& v = p.vision;
    SCOPED_TRACE(name);
    EXPECT_EQ(v.depth, 27);
    EXPECT_EQ(v.hidden_size, 1152);
    EXPECT_EQ(v.intermediate_size, 4304);
    EXPECT_EQ(v.num_heads, 16);
    EXPECT_EQ(v.head_dim(), 72);
    EXPECT_EQ(v.num_position_embeddings, 48 * 48);
    EXPECT_EQ(v.out_hidden_size, p.text.hidden_size);
    const std::vector<TensorSpec> specs = vision_tensor_specs(v);
    EXPECT_EQ(specs.size(), 3u + 27u * 12u + 6u);
    std::map<std::string, std::vector<int64_t>> shape;
    for (const TensorSpec& s : specs) shape[s.name] = s.shape;
    EXPECT_EQ(shape["patch_embed.proj.weight"], (std::vector<int64_t>{1152, 3, 2, 16, 16}));
    EXPECT_EQ(shape["pos_embed.weight"], (std::vector<int64_t>{2304, 1152}));
    EXPECT_EQ(shape["blocks.26.attn.qkv.weight"], (std::vector<int64_t>{3456, 1152}));
    EXPECT_EQ(shape["blocks.26.attn.proj.weight"], (std::vector<int64_t>{1152, 1152}));
    EXPECT_EQ(shape["blocks.26.mlp.linear_fc1.weight"], (std::vector<int64_t>{4304, 1152}));
    EXPECT_EQ(shape["blocks.26.mlp.linear_fc2.weight"], (std::vector<int64_t>{1152, 4304}));
    EXPECT_EQ(shape["merger.norm.weight"], (std::vector<int64_t>{1152}));
    EXPECT_EQ(shape["merger.linear_fc1.weight"], (std::vector<int64_t>{4608, 4608}));
    EXPECT_EQ(shape["merger.linear_fc2.weight"], (std::vector<int64_t>{p.text.hidden_size, 4608}));
  }
  EXPECT_EQ(make_model_preset("flash").vision.out_hidden_size, 4096);
  EXPECT_EQ(make_model_preset("clef").vision.out_hidden_size, 5120);
}

TEST(MakeModel, TinyHasTheGoldenTowerAndProcessorConfig) {
  ScratchDir tmp;
  std::string dir = make(tmp, "tiny", MakeModelOptions{});
  auto r = Release::load(dir);
  ASSERT_TRUE(r->vision.has_value());
  auto golden = Release::load(testing::golden("models/tiny-r2m"));
  ASSERT_EQ(r->visual_tensors().size(), golden->visual_tensors().size());
  for (const auto& [name, t] : golden->visual_tensors()) {
    EXPECT_EQ(r->visual(name).shape, t.shape) << name;
  }
  EXPECT_EQ(r->text.mrope_section, golden->text.mrope_section);
  const auto parse = [](const std::string& path) {
    return nlohmann::json::parse(testing::read_file(path));
  };
  EXPECT_EQ(parse(dir + "/processor_config.json"),
            parse(testing::golden("models/tiny-r2m/processor_config.json")));
  EXPECT_EQ(parse(dir + "/config.json")["vision_config"],
            parse(testing::golden("models/tiny-r2m/config.json"))["vision_config"]);
}

// adjust_preset reshapes the release before it is written: here a tower of 2 heads x 72 (the
// Qwen3.5 tower's head dim) on tiny's backbone, as the CUDA tower test at head dim 72 makes it.
TEST(MakeModel, AdjustPresetReshapesTheTower) {
  ScratchDir tmp;
  MakeModelOptions o;
  o.adjust_preset = [](ModelPreset& p) {
    p.vision.hidden_size = 144;
    p.vision.num_heads = 2;
    p.vision.intermediate_size = 160;
  };
  auto r = Release::load(make(tmp, "hd72", o));
  ASSERT_TRUE(r->vision.has_value());
  EXPECT_EQ(r->vision->hidden_size, 144);
  EXPECT_EQ(r->vision->num_heads, 2);
  EXPECT_EQ(r->vision->head_dim(), 72);
  EXPECT_EQ(r->visual("blocks.0.attn.qkv.weight").shape, (std::vector<int64_t>{432, 144}));
  EXPECT_EQ(r->visual("blocks.0.attn.proj.weight").shape, (std::vector<int64_t>{144, 144}));
  EXPECT_EQ(r->visual("blocks.0.mlp.linear_fc1.weight").shape, (std::vector<int64_t>{160, 144}));
  EXPECT_EQ(r->text.hidden_size, 64);  // tiny's backbone, unchanged
}

// The vision token ids come from the tokenizer (by their text), so a release made with Qwen3's
// tokenizer takes media: its ids are 151652 (start), 151653 (end), 151655 (image), 151656 (video).
TEST(MakeModel, VisionTokenIdsComeFromTheTokenizer) {
  ScratchDir tmp;
  MakeModelOptions o;
  o.tokenizer = testing::golden("tokenizers/qwen3");
  std::string dir;
  try {
    dir = make(tmp, "q", o);
  } catch (const std::exception& e) {
    FAIL() << e.what();
  }
  const auto cfg = nlohmann::json::parse(testing::read_file(dir + "/config.json"));
  EXPECT_EQ(cfg["vision_start_token_id"], 151652);
  EXPECT_EQ(cfg["vision_end_token_id"], 151653);
  EXPECT_EQ(cfg["image_token_id"], 151655);
  EXPECT_EQ(cfg["video_token_id"], 151656);
  const media::MediaConfig mc = media::load_media_config(dir);
  EXPECT_EQ(mc.tokens.image_pad, 151655);
}

TEST(MakeModel, TinyLoadsWithHfStyleInit) {
  ScratchDir tmp;
  std::string dir = make(tmp, "tiny", MakeModelOptions{});
  auto r = Release::load(dir);
  EXPECT_EQ(r->text.hidden_size, 64);
  EXPECT_EQ(r->text.vocab_size, 832);  // tiny-bpe's 830 ids rounded up to 64
  EXPECT_EQ(r->head_tensors().size(), 86u);
  EXPECT_EQ(r->tokenizer->vocab_size(), 830u);
  EXPECT_EQ(testing::read_file(dir + "/tokenizer.json"),
            testing::read_file(testing::golden("tokenizers/tiny-bpe/tokenizer.json")));
  EXPECT_EQ(testing::read_file(dir + "/tokenizer_config.json"),
            testing::read_file(testing::golden("tokenizers/tiny-bpe/tokenizer_config.json")));

  for (const char* name : {"embed_tokens.weight", "lm_head.weight", "layers.0.mlp.gate_proj.weight",
                           "layers.1.linear_attn.conv1d.weight"}) {
    Stats s = stats(r->backbone(name));
    EXPECT_NEAR(s.sd, 0.02, 0.003) << name;
    EXPECT_NEAR(s.mean, 0.0, 0.002) << name;
  }
  Stats alog = stats(r->backbone("layers.0.linear_attn.A_log"));
  EXPECT_GE(alog.min, 0.0);
  EXPECT_LE(alog.max, std::log(16.0) + 0.01);
  EXPECT_GT(alog.max, alog.min);  // not a constant
  for (const char* name : {"layers.0.input_layernorm.weight", "layers.3.self_attn.q_norm.weight",
                           "norm.weight", "layers.3.post_attention_layernorm.weight"}) {
    Stats s = stats(r->backbone(name));
    EXPECT_EQ(s.min, 0.0) << name;
    EXPECT_EQ(s.max, 0.0) << name;
  }
  for (const char* name : {"layers.0.linear_attn.dt_bias", "layers.0.linear_attn.norm.weight"}) {
    Stats s = stats(r->backbone(name));
    EXPECT_EQ(s.min, 1.0) << name;
    EXPECT_EQ(s.max, 1.0) << name;
  }
  for (const auto& [name, t] : r->head_tensors()) {
    Stats s = stats(t);
    bool norm = name.find("norm") != std::string::npos;
    bool bias = name.size() > 4 && name.substr(name.size() - 4) == "bias";
    if (t.shape.empty() || bias) {
      EXPECT_EQ(s.min, 0.0) << name;
      EXPECT_EQ(s.max, 0.0) << name;
    } else if (norm) {
      EXPECT_EQ(s.min, 1.0) << name;
      EXPECT_EQ(s.max, 1.0) << name;
    } else {
      EXPECT_NEAR(s.sd, 0.02, 0.005) << name;
    }
  }
}

TEST(MakeModel, DeterministicPerSeed) {
  ScratchDir tmp;
  MakeModelOptions o;
  o.seed = 7;
  auto a = hash_release(make(tmp, "a", o));
  auto b = hash_release(make(tmp, "b", o));
  o.seed = 8;
  auto c = hash_release(make(tmp, "c", o));
  ASSERT_EQ(a.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].sha256, b[i].sha256) << a[i].path;
    bool weights = a[i].path.find(".safetensors") != std::string::npos;
    if (weights) {
      EXPECT_NE(a[i].sha256, c[i].sha256) << a[i].path;
    } else {
      EXPECT_EQ(a[i].sha256, c[i].sha256) << a[i].path;
    }
  }
}

// A large vocab (the Qwen3 tokenizer) makes tensors big enough for the multi-threaded generator;
// small shards force an index. The bytes must not depend on the thread count.
TEST(MakeModel, ShardedAndThreadCountIndependent) {
  ScratchDir tmp;
  MakeModelOptions o;
  o.tokenizer = testing::golden("tokenizers/qwen3");
  o.shard_bytes = 8u << 20;
  o.threads = 1;
  std::string one = make(tmp, "t1", o);
  o.threads = 3;
  std::string three = make(tmp, "t3", o);
  auto h1 = hash_release(one), h3 = hash_release(three);
  ASSERT_EQ(h1.size(), h3.size());
  for (size_t i = 0; i < h1.size(); ++i) EXPECT_EQ(h1[i].sha256, h3[i].sha256) << h1[i].path;
  EXPECT_TRUE(std::filesystem::exists(one + "/model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(one + "/model.safetensors"));
  auto r = Release::load(one);
  EXPECT_EQ(r->text.vocab_size, 151680);  // 151,669 ids rounded up to 64
  EXPECT_NEAR(stats(r->backbone("embed_tokens.weight")).sd, 0.02, 0.001);
}

TEST(MakeModel, RefusesNonEmptyOutputUnlessForced) {
  ScratchDir tmp;
  MakeModelOptions o;
  std::string dir = make(tmp, "m", o);
  o.out_dir = dir;
  EXPECT_THROW(make_model(o), std::runtime_error);
  o.overwrite = true;
  o.seed = 1;
  EXPECT_NO_THROW(make_model(o));
  for (const auto& e : std::filesystem::directory_iterator(tmp.path())) {
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
  }
  o.out_dir = tmp / "x";
  o.tokenizer = tmp / "no-such-tokenizer.json";
  EXPECT_THROW(make_model(o), std::runtime_error);
}

TEST(MakeModel, Cli) {
  ScratchDir tmp;
  auto run = [](const std::string& args) {
    int rc =
        std::system((std::string(CLEF_BINARY) + " make-model " + args + " 2>/dev/null").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  EXPECT_EQ(run("--preset tiny --seed 3 --out " + (tmp / "m")), 0);
  EXPECT_EQ(Release::load(tmp / "m")->text.num_hidden_layers, 8);
  EXPECT_EQ(run("--preset tiny --out " + (tmp / "m")), 1);  // exists
  EXPECT_EQ(run("--preset huge --out " + (tmp / "n")), 2);  // usage error
  EXPECT_FALSE(std::filesystem::exists(tmp / "n"));
}

}  // namespace
}  // namespace clef::model

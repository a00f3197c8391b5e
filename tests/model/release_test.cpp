// Release::load on the golden tiny releases, their variants (flat config, sharded, "model." prefix,
// F32 tensors) and the error paths: each refusal is a LoadError naming the file and the tensor or
// key.
#include <gtest/gtest.h>

#include "model/bf16.h"
#include "model/tensor_specs.h"
#include "model_test_util.h"

namespace clef::model {
namespace {

using nlohmann::json;
using testing::copy_release;
using testing::edit_json;
using testing::load_error;
using testing::ScratchDir;

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

TEST(Release, LoadsTinyR2) {
  auto r = Release::load(testing::golden("models/tiny-r2"));
  const TextConfig& t = r->text;
  EXPECT_EQ(t.hidden_size, 64);
  EXPECT_EQ(t.num_hidden_layers, 8);
  EXPECT_EQ(t.intermediate_size, 128);
  EXPECT_EQ(t.num_attention_heads, 4);
  EXPECT_EQ(t.num_key_value_heads, 2);
  EXPECT_EQ(t.head_dim, 32);
  EXPECT_EQ(t.linear_num_key_heads, 2);
  EXPECT_EQ(t.linear_num_value_heads, 4);
  EXPECT_EQ(t.linear_key_head_dim, 16);
  EXPECT_EQ(t.linear_value_head_dim, 16);
  EXPECT_EQ(t.linear_conv_kernel_dim, 4);
  EXPECT_EQ(t.vocab_size, 832);
  EXPECT_EQ(t.rms_norm_eps, 1e-6);
  EXPECT_EQ(t.rope_theta, 1e7);
  EXPECT_EQ(t.partial_rotary_factor, 0.25);
  ASSERT_EQ(t.layer_types.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(t.layer_types[i], i % 4 == 3 ? LayerType::FullAttention : LayerType::LinearAttention)
        << i;
  }
  EXPECT_EQ(r->head.hidden_size, 64);
  EXPECT_EQ(r->head.width, 32);
  EXPECT_EQ(r->head.routing_layers, 2);
  EXPECT_EQ(r->head.layers, 2);
  EXPECT_EQ(r->head.heads, 4);
  EXPECT_EQ(r->head.feedforward, 64);
  // 3 + 6 GDN layers x 14 + 2 attention layers x 11 = 109 (the 21 model.visual.* tensors are the
  // vision tower's, apart)
  EXPECT_EQ(r->backbone_tensors().size(), 109u);
  EXPECT_EQ(r->head_tensors().size(), 86u);  // 22 + 14*2 + 18*2
  for (const auto& [name, tensor] : r->backbone_tensors()) {
    EXPECT_FALSE(contains(name, "visual")) << name;
    EXPECT_FALSE(contains(name, "model.")) << name;
  }
  EXPECT_EQ(r->backbone("layers.0.linear_attn.in_proj_qkv.weight").shape,
            (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(r->backbone("layers.3.self_attn.q_proj.weight").shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(r->backbone("layers.0.linear_attn.conv1d.weight").shape,
            (std::vector<int64_t>{128, 1, 4}));
  EXPECT_EQ(r->head_tensor("prior_logit_scale").shape, std::vector<int64_t>{});
  EXPECT_NE(r->backbone("lm_head.weight").data, r->backbone("embed_tokens.weight").data);  // untied
  EXPECT_THROW(r->backbone("layers.0.self_attn.q_proj.weight"), LoadError);
  EXPECT_THROW(r->head_tensor("nope"), LoadError);
  EXPECT_EQ(r->name, "tiny-r2");
  EXPECT_EQ(r->revision, "unknown");
  EXPECT_FALSE(r->weights_sha256_verified);
  ASSERT_NE(r->tokenizer, nullptr);
  EXPECT_LE(r->tokenizer->vocab_size(), 832u);
}

// The reference's own embeddings (debug hidden_0 = embed_tokens[input_ids], float32) must equal the
// loaded embedding rows: checks the mmap views, offsets and the bf16 decoding against independent
// data.
TEST(Release, EmbeddingRowsMatchReferenceHiddenZero) {
  auto r = Release::load(testing::golden("models/tiny-r2"));
  auto dbg = SafetensorsFile::open(testing::golden("models/tiny-r2.debug0.safetensors"));
  const Tensor* ids = dbg->find("input_ids");
  const Tensor* h0 = dbg->find("hidden_0");
  ASSERT_TRUE(ids && h0);
  const Tensor& emb = r->backbone("embed_tokens.weight");
  const size_t H = 64;
  ASSERT_EQ(h0->numel(), ids->numel() * H);
  std::vector<float> row(H);
  for (size_t t = 0; t < ids->numel(); ++t) {
    size_t id = static_cast<size_t>(ids->at(t));
    emb.to_float(row.data(), id * H, H);
    for (size_t j = 0; j < H; ++j)
      ASSERT_EQ(row[j], h0->at(t * H + j)) << "token " << t << " dim " << j;
  }
}

TEST(Release, LoadsTinyR3) {
  auto r = Release::load(testing::golden("models/tiny-r3"));
  EXPECT_EQ(r->text.hidden_size, 48);
  EXPECT_EQ(r->text.linear_num_value_heads / r->text.linear_num_key_heads, 3);
  EXPECT_EQ(r->text.linear_value_head_dim, 8);
  EXPECT_EQ(r->text.num_key_value_heads, 1);
  EXPECT_EQ(r->head.routing_layers, 1);
  EXPECT_EQ(r->head.layers, 3);
  EXPECT_EQ(r->head_tensors().size(), 22u + 14u + 18u * 3u);
  EXPECT_EQ(r->backbone_tensors().size(), backbone_tensor_specs(r->text).size());
  EXPECT_EQ(r->backbone("layers.0.linear_attn.in_proj_qkv.weight").shape,
            (std::vector<int64_t>{2 * 2 * 16 + 6 * 8, 48}));
}

TEST(Release, AcceptsFlatConfigOldRopeKeysAndIntervalDerivedLayerTypes) {
  ScratchDir tmp;
  std::string dir = copy_release(tmp, "tiny-r2");
  edit_json(dir + "/config.json", [](json& j) {
    json tc = j["text_config"];
    tc.erase("layer_types");  // full_attention_interval absent: default 4 gives tiny-r2's pattern
    tc.erase("rope_parameters");
    tc["rope_theta"] = 1e6;
    tc["partial_rotary_factor"] = 0.5;
    j = tc;  // flat text config
  });
  auto r = Release::load(dir);
  EXPECT_EQ(r->text.rope_theta, 1e6);
  EXPECT_EQ(r->text.partial_rotary_factor, 0.5);
  ASSERT_EQ(r->text.layer_types.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(r->text.layer_types[i],
              i % 4 == 3 ? LayerType::FullAttention : LayerType::LinearAttention);
  }
}

TEST(Release, IntervalDerivedLayerTypesAreCheckedAgainstTensors) {
  ScratchDir tmp;
  std::string dir = copy_release(tmp, "tiny-r2");
  edit_json(dir + "/config.json", [](json& j) {
    json& tc = j["text_config"];
    tc.erase("layer_types");
    tc["full_attention_interval"] = 2;
  });
  std::string msg = load_error([&] { Release::load(dir); });
  EXPECT_TRUE(contains(msg, "layers.1.")) << msg;
}

TEST(Release, AcceptsModelPrefixShardsAndF32Tensors) {
  ScratchDir tmp;
  std::string dir = copy_release(tmp, "tiny-r2");
  std::string st = dir + "/model.safetensors";
  // Split into two shards with "model." names (text-only checkpoint style) and store norm.weight as
  // F32 with a value that is not a bf16 number.
  auto f = SafetensorsFile::open(st);
  std::vector<Tensor> a, b;
  std::vector<float> norm(64, 0.1f);
  json weight_map = json::object();
  for (Tensor t : f->tensors()) {
    if (t.name.rfind("model.language_model.", 0) == 0) t.name = "model." + t.name.substr(21);
    if (t.name == "model.norm.weight") {
      t.dtype = DType::F32;
      t.data = reinterpret_cast<const uint8_t*>(norm.data());
      t.nbytes = 64 * 4;
    }
    bool first = t.name < "model.layers.4";
    (first ? a : b).push_back(t);
    weight_map[t.name] =
        first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(dir + "/model-00001-of-00002.safetensors", a, {{"format", "pt"}});
  write_safetensors(dir + "/model-00002-of-00002.safetensors", b, {{"format", "pt"}});
  testing::write_file(dir + "/model.safetensors.index.json",
                      json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
  f.reset();
  std::filesystem::remove(st);

  auto ref = Release::load(testing::golden("models/tiny-r2"));
  auto r = Release::load(dir);
  ASSERT_EQ(r->backbone_tensors().size(), ref->backbone_tensors().size());
  for (const auto& [name, t] : ref->backbone_tensors()) {
    const Tensor& u = r->backbone(name);
    EXPECT_EQ(u.shape, t.shape) << name;
    if (name == "norm.weight") continue;
    ASSERT_EQ(u.nbytes, t.nbytes) << name;
    EXPECT_EQ(std::memcmp(u.data, t.data, t.nbytes), 0) << name;
  }
  const Tensor& n = r->backbone("norm.weight");
  EXPECT_EQ(n.dtype, DType::F32);
  EXPECT_EQ(n.at(5), round_to_bf16(0.1f));
  LoadOptions raw;
  raw.round_to_bf16 = false;
  EXPECT_EQ(Release::load(dir, raw)->backbone("norm.weight").at(5), 0.1f);

  // An index entry whose shard is missing.
  edit_json(dir + "/model.safetensors.index.json", [](json& j) {
    j["weight_map"]["model.norm.weight"] = "model-00003-of-00002.safetensors";
  });
  std::string msg = load_error([&] { Release::load(dir); });
  EXPECT_TRUE(contains(msg, "model-00003-of-00002.safetensors")) << msg;
}

TEST(Release, RefusesMissingFiles) {
  for (const char* file : {"config.json", "joint_head_config.json", "joint_head.safetensors",
                           "model.safetensors", "tokenizer.json"}) {
    SCOPED_TRACE(file);
    ScratchDir tmp;
    std::string dir = copy_release(tmp, "tiny-r2");
    std::filesystem::remove(dir + "/" + file);
    std::string msg = load_error([&] { Release::load(dir); });
    EXPECT_TRUE(
        contains(msg, std::string(file) == "model.safetensors" ? "model.safetensors" : file))
        << msg;
  }
  EXPECT_TRUE(
      contains(load_error([] { Release::load("/nonexistent/clef"); }), "/nonexistent/clef"));
}

TEST(Release, RefusesMissingUnexpectedAndMisshapenTensors) {
  struct Case {
    const char* what;
    const char* file;
    std::function<void(std::vector<Tensor>&)> edit;
    std::vector<const char*> expect;
  };
  std::vector<int64_t> bad_shape = {64, 128};  // same bytes as [128, 64]
  std::vector<Case> cases = {
      {"missing backbone tensor",
       "model.safetensors",
       [](std::vector<Tensor>& ts) {
         std::erase_if(ts, [](const Tensor& t) {
           return t.name == "model.language_model.layers.5.linear_attn.A_log";
         });
       },
       {"missing tensor", "layers.5.linear_attn.A_log"}},
      {"missing lm_head",
       "model.safetensors",
       [](std::vector<Tensor>& ts) {
         std::erase_if(ts, [](const Tensor& t) { return t.name == "lm_head.weight"; });
       },
       {"lm_head.weight"}},
      {"wrong backbone shape",
       "model.safetensors",
       [&](std::vector<Tensor>& ts) {
         for (Tensor& t : ts) {
           if (t.name == "model.language_model.layers.2.mlp.up_proj.weight")
             t.shape = bad_shape;  // 128x64 bytes
         }
       },
       {"model.safetensors", "layers.2.mlp.up_proj.weight", "[64, 128]", "[128, 64]"}},
      {"unexpected backbone tensor",
       "model.safetensors",
       [](std::vector<Tensor>& ts) {
         Tensor t = ts.back();
         t.name = "model.language_model.layers.0.self_attn.q_proj.weight";
         ts.push_back(t);
       },
       {"model.safetensors", "unexpected", "layers.0.self_attn.q_proj.weight"}},
      {"foreign backbone name",
       "model.safetensors",
       [](std::vector<Tensor>& ts) { ts[0].name = "encoder.weight"; },
       {"model.safetensors", "encoder.weight"}},
      {"integer dtype",
       "model.safetensors",
       [](std::vector<Tensor>& ts) {
         for (Tensor& t : ts) {
           if (t.name == "model.language_model.norm.weight") {
             t.dtype = DType::I32;
             t.shape = {32};
           }
         }
       },
       {"norm.weight", "I32"}},
      {"missing head tensor",
       "joint_head.safetensors",
       [](std::vector<Tensor>& ts) {
         std::erase_if(ts, [](const Tensor& t) { return t.name == "residual_gate"; });
       },
       {"joint_head.safetensors", "residual_gate"}},
      {"wrong head shape",
       "joint_head.safetensors",
       [](std::vector<Tensor>& ts) {
         for (Tensor& t : ts) {
           if (t.name == "layers.1.norm2.bias") t.shape = {2, 16};
         }
       },
       {"joint_head.safetensors", "layers.1.norm2.bias", "[2, 16]"}},
      {"extra head tensor",
       "joint_head.safetensors",
       [](std::vector<Tensor>& ts) {
         Tensor t = ts.back();
         t.name = "layers.2.norm1.weight";
         ts.push_back(t);
       },
       {"joint_head.safetensors", "layers.2.norm1.weight"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ScratchDir tmp;
    std::string dir = copy_release(tmp, "tiny-r2");
    testing::rewrite_safetensors(dir + "/" + c.file, c.edit);
    std::string msg = load_error([&] { Release::load(dir); });
    for (const char* e : c.expect) EXPECT_TRUE(contains(msg, e)) << "'" << e << "' not in: " << msg;
  }
}

TEST(Release, RefusesCorruptSafetensors) {
  struct Case {
    const char* what;
    std::function<void(const std::string&)> corrupt;
    std::vector<const char*> expect;
  };
  std::vector<Case> cases = {
      {"truncated",
       [](const std::string& p) {
         std::filesystem::resize_file(p, std::filesystem::file_size(p) / 2);
       },
       {"model.safetensors", "past the end", "model."}},
      {"corrupt header JSON",
       [](const std::string& p) {
         std::string b = testing::read_file(p);
         b[8 + 40] = '\x01';
         testing::write_file(p, b);
       },
       {"model.safetensors", "not valid JSON"}},
      {"header length past EOF",
       [](const std::string& p) {
         std::string b = testing::read_file(p);
         uint64_t n = b.size();
         for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((n >> (8 * i)) & 0xff);
         testing::write_file(p, b);
       },
       {"model.safetensors", "past the end"}},
      {"bad dtype",
       [](const std::string& p) {
         testing::edit_safetensors_header(
             p, [](json& h) { h["model.language_model.norm.weight"]["dtype"] = "F8_E5M2"; });
       },
       {"model.safetensors", "model.language_model.norm.weight", "F8_E5M2"}},
      {"overlapping offsets",
       [](const std::string& p) {
         testing::edit_safetensors_header(p, [](json& h) {
           json& e = h["model.language_model.norm.weight"];
           json& o = h["lm_head.weight"]["data_offsets"];
           e["data_offsets"] = {o[0].get<uint64_t>() + 2, o[0].get<uint64_t>() + 130};
         });
       },
       {"model.safetensors", "overlaps"}},
      {"out-of-range offsets",
       [](const std::string& p) {
         testing::edit_safetensors_header(p, [](json& h) {
           h["model.language_model.norm.weight"]["data_offsets"] = {1ull << 40, (1ull << 40) + 128};
         });
       },
       {"model.safetensors", "model.language_model.norm.weight", "past the end"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ScratchDir tmp;
    std::string dir = copy_release(tmp, "tiny-r2");
    c.corrupt(dir + "/model.safetensors");
    std::string msg = load_error([&] { Release::load(dir); });
    for (const char* e : c.expect) EXPECT_TRUE(contains(msg, e)) << "'" << e << "' not in: " << msg;
  }
}

TEST(Release, RefusesConfigsItDoesNotImplement) {
  struct Case {
    const char* what;
    const char* file;
    std::function<void(json&)> edit;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"hidden_act", "config.json", [](json& j) { j["text_config"]["hidden_act"] = "gelu"; },
       "hidden_act"},
      {"attention_bias", "config.json", [](json& j) { j["text_config"]["attention_bias"] = true; },
       "attention_bias"},
      {"rope type", "config.json",
       [](json& j) { j["text_config"]["rope_parameters"]["rope_type"] = "yarn"; }, "yarn"},
      {"old rope_scaling", "config.json",
       [](json& j) {
         j["text_config"].erase("rope_parameters");
         j["text_config"]["rope_theta"] = 1e7;
         j["text_config"]["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
       },
       "linear"},
      {"layer_types length", "config.json",
       [](json& j) { j["text_config"]["layer_types"].erase(0); }, "layer_types"},
      {"layer type", "config.json",
       [](json& j) { j["text_config"]["layer_types"][1] = "sliding_attention"; },
       "sliding_attention"},
      {"model_type", "config.json", [](json& j) { j["model_type"] = "llama"; }, "llama"},
      {"layer count", "config.json",
       [](json& j) { j["text_config"]["num_hidden_layers"] = 100000; }, "num_hidden_layers"},
      {"head layer count", "joint_head_config.json", [](json& j) { j["layers"] = 1000000; },
       "layers"},
      {"missing dim", "config.json", [](json& j) { j["text_config"].erase("head_dim"); },
       "head_dim"},
      {"string dim", "config.json", [](json& j) { j["text_config"]["hidden_size"] = "64"; },
       "hidden_size"},
      {"GQA ratio", "config.json", [](json& j) { j["text_config"]["num_key_value_heads"] = 3; },
       "num_key_value_heads"},
      {"GDN ratio", "config.json", [](json& j) { j["text_config"]["linear_num_value_heads"] = 5; },
       "linear_num_value_heads"},
      {"rotary dims", "config.json",
       [](json& j) { j["text_config"]["rope_parameters"]["partial_rotary_factor"] = 0.3; },
       "partial_rotary_factor"},
      {"head hidden size", "joint_head_config.json", [](json& j) { j["hidden_size"] = 48; },
       "hidden_size"},
      {"head unknown key", "joint_head_config.json", [](json& j) { j["activation"] = "relu"; },
       "activation"},
      {"head width", "joint_head_config.json", [](json& j) { j["heads"] = 5; }, "heads"},
      {"tokenizer ids beyond vocab", "tokenizer.json",
       [](json& j) { j["model"]["vocab"]["zzzz"] = 900; }, "vocab_size"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ScratchDir tmp;
    std::string dir = copy_release(tmp, "tiny-r2");
    edit_json(dir + "/" + c.file, c.edit);
    std::string msg = load_error([&] { Release::load(dir); });
    EXPECT_TRUE(contains(msg, c.file)) << msg;
    EXPECT_TRUE(contains(msg, c.expect)) << msg;
  }
  // dropout in the head config is accepted (inference ignores it)
  ScratchDir tmp;
  std::string dir = copy_release(tmp, "tiny-r2");
  edit_json(dir + "/joint_head_config.json", [](json& j) { j["dropout"] = 0.1; });
  EXPECT_NO_THROW(Release::load(dir));
}

TEST(Release, TiedEmbeddingsAliasLmHead) {
  ScratchDir tmp;
  std::string dir = copy_release(tmp, "tiny-r2");
  edit_json(dir + "/config.json", [](json& j) { j["tie_word_embeddings"] = true; });
  testing::rewrite_safetensors(dir + "/model.safetensors", [](std::vector<Tensor>& ts) {
    std::erase_if(ts, [](const Tensor& t) { return t.name == "lm_head.weight"; });
  });
  auto r = Release::load(dir);
  EXPECT_EQ(r->backbone("lm_head.weight").data, r->backbone("embed_tokens.weight").data);
}

TEST(Release, SkipsMultiTokenPrediction) {
  ScratchDir tmp;
  std::string dir = copy_release(tmp, "tiny-r2");
  testing::rewrite_safetensors(dir + "/model.safetensors", [](std::vector<Tensor>& ts) {
    Tensor t = ts.back();
    t.name = "mtp.layers.0.mlp.up_proj.weight";
    ts.push_back(t);
  });
  auto r = Release::load(dir);
  EXPECT_EQ(r->backbone_tensors().size(), 109u);
  EXPECT_EQ(r->visual_tensors().size(), 21u);
}

// The tiny tower of tiny-r2 (docs/spec/media.md §7): its vision_config and the 21 model.visual.*
// tensors, plus the multimodal rotary split of the text config.
TEST(Release, LoadsTheVisionTower) {
  auto r = Release::load(testing::golden("models/tiny-r2"));
  ASSERT_TRUE(r->vision.has_value());
  const VisionConfig& v = *r->vision;
  EXPECT_EQ(v.depth, 1);
  EXPECT_EQ(v.hidden_size, 32);
  EXPECT_EQ(v.intermediate_size, 64);
  EXPECT_EQ(v.num_heads, 2);
  EXPECT_EQ(v.head_dim(), 16);
  EXPECT_EQ(v.patch_size, 16);
  EXPECT_EQ(v.temporal_patch_size, 2);
  EXPECT_EQ(v.spatial_merge_size, 2);
  EXPECT_EQ(v.out_hidden_size, 64);
  EXPECT_EQ(v.num_position_embeddings, 64);
  EXPECT_EQ(v.rope_theta, 10000.0);
  EXPECT_EQ(r->text.mrope_section, (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(r->visual_tensors().size(), 21u);
  EXPECT_EQ(r->visual("patch_embed.proj.weight").shape, (std::vector<int64_t>{32, 3, 2, 16, 16}));
  EXPECT_EQ(r->visual("merger.linear_fc1.weight").shape, (std::vector<int64_t>{128, 128}));
  EXPECT_THROW(r->visual("blocks.1.norm1.weight"), LoadError);
}

TEST(Release, WeightsWithoutATowerAreATextModel) {
  ScratchDir tmp;
  std::string dir = copy_release(tmp, "tiny-r2");
  testing::rewrite_safetensors(dir + "/model.safetensors", [](std::vector<Tensor>& ts) {
    std::erase_if(ts, [](const Tensor& t) { return t.name.rfind("model.visual.", 0) == 0; });
  });
  auto r = Release::load(dir);
  EXPECT_FALSE(r->vision.has_value());
  EXPECT_TRUE(r->visual_tensors().empty());
}

TEST(Release, RefusesAPartialOrMisshapenTower) {
  ScratchDir t1, t2, t3, t4;
  std::string extra = copy_release(t1, "tiny-r2");
  testing::rewrite_safetensors(extra + "/model.safetensors", [](std::vector<Tensor>& ts) {
    Tensor t = ts.back();
    t.name = "model.visual.extra.weight";
    ts.push_back(t);
  });
  std::string msg = load_error([&] { Release::load(extra); });
  EXPECT_TRUE(contains(msg, "unexpected tensor 'extra.weight'")) << msg;

  std::string missing = copy_release(t2, "tiny-r2");
  testing::rewrite_safetensors(missing + "/model.safetensors", [](std::vector<Tensor>& ts) {
    std::erase_if(ts, [](const Tensor& t) { return t.name == "model.visual.pos_embed.weight"; });
  });
  msg = load_error([&] { Release::load(missing); });
  EXPECT_TRUE(contains(msg, "missing tensor 'pos_embed.weight'")) << msg;

  std::string table = copy_release(t3, "tiny-r2");  // a 9 x 9 table for 64 rows
  edit_json(table + "/config.json",
            [](json& j) { j["vision_config"]["num_position_embeddings"] = 81; });
  msg = load_error([&] { Release::load(table); });
  EXPECT_TRUE(contains(msg, "pos_embed.weight") && contains(msg, "[81, 32]")) << msg;

  // Without a vision_config the weights are ignored (a text-only config), as HF does.
  std::string no_config = copy_release(t4, "tiny-r2");
  edit_json(no_config + "/config.json", [](json& j) { j.erase("vision_config"); });
  EXPECT_FALSE(Release::load(no_config)->vision.has_value());
}

TEST(Release, RefusesVisionConfigsItCannotRun) {
  auto refuse = [&](const std::string& name, const std::function<void(json&)>& edit,
                    const std::string& expect) {
    ScratchDir tmp;
    std::string dir = copy_release(tmp, "tiny-r2");
    edit_json(dir + "/config.json", edit);
    std::string msg = load_error([&] { Release::load(dir); });
    EXPECT_TRUE(contains(msg, expect)) << name << ": " << msg;
  };
  refuse(
      "act", [](json& j) { j["vision_config"]["hidden_act"] = "gelu"; }, "hidden_act");
  refuse(
      "patch", [](json& j) { j["vision_config"]["patch_size"] = 14; }, "patch_size 16");
  refuse(
      "heads", [](json& j) { j["vision_config"]["num_heads"] = 3; }, "head_dim");
  refuse(
      "square", [](json& j) { j["vision_config"]["num_position_embeddings"] = 60; },
      "not a square");
  refuse(
      "deepstack", [](json& j) { j["vision_config"]["deepstack_visual_indexes"] = {0}; },
      "deepstack");
  refuse(
      "out", [](json& j) { j["vision_config"]["out_hidden_size"] = 32; }, "out_hidden_size");
  refuse(
      "mrope", [](json& j) { j["text_config"]["rope_parameters"]["mrope_interleaved"] = false; },
      "mrope_interleaved");
  refuse(
      "section",
      [](json& j) {
        j["text_config"]["rope_parameters"]["mrope_section"] = {2, 1};
      },
      "mrope_section");
}

}  // namespace
}  // namespace clef::model

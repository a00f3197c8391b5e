// make-model: presets, HF-style random init with a counter-based RNG, sharded streaming writes.
#include "model/make_model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "model/bf16.h"
#include "model/config.h"
#include "model/embedded_tokenizer.h"
#include "model/safetensors.h"
#include "model/tensor_specs.h"

namespace clef::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kRealVocab = 248320;

TextConfig text_config(int H, int L, int I, int nh, int nkv, int hd, int hk, int hv, int dk, int dv,
                       int vocab) {
  TextConfig t;
  t.hidden_size = H;
  t.num_hidden_layers = L;
  t.intermediate_size = I;
  t.num_attention_heads = nh;
  t.num_key_value_heads = nkv;
  t.head_dim = hd;
  t.linear_num_key_heads = hk;
  t.linear_num_value_heads = hv;
  t.linear_key_head_dim = dk;
  t.linear_value_head_dim = dv;
  t.vocab_size = vocab;
  for (int i = 0; i < L; ++i) {
    t.layer_types.push_back(i % 4 == 3 ? LayerType::FullAttention : LayerType::LinearAttention);
  }
  return t;
}

HeadConfig head_config(int D, int W, int routing, int layers, int heads, int F) {
  return HeadConfig{D, W, routing, layers, heads, F};
}

// ---- random numbers: splitmix64 over (tensor key, element counter)
// ----------------------------------

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t tensor_key(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name, then mixed with the seed
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return mix(h ^ mix(seed));
}

enum class Init { Normal, Zeros, Ones, ALog };

struct PlannedTensor {
  TensorSpec spec;  // name as stored in the file
  Init init = Init::Normal;
  uint64_t key = 0;
};

// One Box-Muller draw gives the normals of elements 2j (cos) and 2j+1 (sin), std 0.02.
inline void normal_pair(uint64_t key, uint64_t j, float& z0, float& z1) {
  uint64_t h = mix(key + j);
  float u1 = static_cast<float>((h >> 40) + 1) * 0x1.0p-24f;  // (0, 1]
  float u2 = static_cast<float>(h & 0xffffff) * 0x1.0p-24f;
  float r = 0.02f * std::sqrt(-2.0f * std::log(u1));
  float a = 6.28318530717958647f * u2;
  z0 = r * std::cos(a);
  z1 = r * std::sin(a);
}

// Element i of a non-normal tensor (before bf16 rounding).
inline float init_value(const PlannedTensor& p, uint64_t i) {
  switch (p.init) {
    case Init::Zeros:
      return 0.0f;
    case Init::Ones:
      return 1.0f;
    case Init::ALog: {  // log(uniform(1, 16))
      double u = static_cast<double>(mix(p.key + i) >> 11) * 0x1.0p-53;
      return static_cast<float>(std::log(1.0 + 15.0 * u));
    }
    case Init::Normal: {
      float z0, z1;
      normal_pair(p.key, i >> 1, z0, z1);
      return (i & 1) ? z1 : z0;
    }
  }
  return 0.0f;
}

Init backbone_init(const std::string& canonical) {
  auto ends = [&](const std::string& s) {
    return canonical.size() >= s.size() &&
           canonical.compare(canonical.size() - s.size(), s.size(), s) == 0;
  };
  if (ends("linear_attn.norm.weight")) return Init::Ones;  // gated RMSNorm: plain · w
  if (ends("layernorm.weight") || canonical == "norm.weight" || ends("q_norm.weight") ||
      ends("k_norm.weight")) {
    return Init::Zeros;  // RMSNorm(1 + w)
  }
  if (ends("A_log")) return Init::ALog;
  if (ends("dt_bias")) return Init::Ones;
  return Init::Normal;
}

Init layer_norm_style_init(const std::string& name) {  // head and vision tower
  bool bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
  if (name.find("norm") != std::string::npos) return bias ? Init::Zeros : Init::Ones;
  if (bias) return Init::Zeros;
  return Init::Normal;
}

// ---- the vision tower (docs/spec/media.md §7)
// ------------------------------------------------------------------------------------------------

// depth, width, MLP, heads, position table rows; the output is the backbone's width.
VisionConfig vision_config(int depth, int width, int mlp, int heads, int positions, int out) {
  VisionConfig v;
  v.depth = depth;
  v.hidden_size = width;
  v.intermediate_size = mlp;
  v.num_heads = heads;
  v.num_position_embeddings = positions;
  v.out_hidden_size = out;
  return v;
}

json vision_config_json(const VisionConfig& v) {
  return json{{"depth", v.depth},
              {"hidden_act", "gelu_pytorch_tanh"},
              {"hidden_size", v.hidden_size},
              {"in_channels", v.in_channels},
              {"initializer_range", 0.02},
              {"intermediate_size", v.intermediate_size},
              {"model_type", "qwen3_5_vision"},
              {"num_heads", v.num_heads},
              {"num_position_embeddings", v.num_position_embeddings},
              {"out_hidden_size", v.out_hidden_size},
              {"patch_size", v.patch_size},
              {"rope_parameters", {{"rope_theta", v.rope_theta}, {"rope_type", "axial"}}},
              {"spatial_merge_size", v.spatial_merge_size},
              {"temporal_patch_size", v.temporal_patch_size}};
}

// processor_config.json: the Qwen3.5 release's (Qwen3VLProcessor defaults, docs/spec/media.md §3).
json processor_config_json(const VisionConfig& v) {
  auto common = [&](int64_t shortest, int64_t longest) {
    return json{{"do_convert_rgb", true},
                {"do_normalize", true},
                {"do_rescale", true},
                {"do_resize", true},
                {"image_mean", {0.5, 0.5, 0.5}},
                {"image_std", {0.5, 0.5, 0.5}},
                {"merge_size", v.spatial_merge_size},
                {"patch_size", v.patch_size},
                {"resample", 3},
                {"rescale_factor", 1.0 / 255.0},
                {"size", {{"longest_edge", longest}, {"shortest_edge", shortest}}},
                {"temporal_patch_size", v.temporal_patch_size}};
  };
  json image = common(65536, 16777216);
  image["image_processor_type"] = "Qwen2VLImageProcessor";
  json video = common(4096, 25165824);
  video["do_sample_frames"] = true;
  video["fps"] = 2;
  video["max_frames"] = 768;
  video["min_frames"] = 4;
  video["return_metadata"] = false;
  video["video_processor_type"] = "Qwen3VLVideoProcessor";
  return json{{"image_processor", image},
              {"processor_class", "Qwen3VLProcessor"},
              {"video_processor", video}};
}

// config.json in the style of the golden tiny releases (HF Qwen3_5ForConditionalGeneration, sorted
// keys).
json config_json(const TextConfig& t, const VisionConfig& v) {
  json layer_types = json::array();
  for (LayerType lt : t.layer_types) {
    layer_types.push_back(lt == LayerType::FullAttention ? "full_attention" : "linear_attention");
  }
  // mrope sections split the rotary half-dims (t/h/w); they must add up to rd / 2.
  int half = static_cast<int>(t.head_dim * t.partial_rotary_factor) / 2;
  json mrope = half == 32 ? json{11, 11, 10}  // Qwen3.5's own split
                          : json{half - 2 * (half / 4), half / 4, half / 4};
  json text = {{"attention_bias", false},
               {"attention_dropout", 0.0},
               {"bos_token_id", nullptr},
               {"eos_token_id", nullptr},
               {"head_dim", t.head_dim},
               {"hidden_act", "silu"},
               {"hidden_size", t.hidden_size},
               {"initializer_range", 0.02},
               {"intermediate_size", t.intermediate_size},
               {"layer_types", layer_types},
               {"linear_conv_kernel_dim", t.linear_conv_kernel_dim},
               {"linear_key_head_dim", t.linear_key_head_dim},
               {"linear_num_key_heads", t.linear_num_key_heads},
               {"linear_num_value_heads", t.linear_num_value_heads},
               {"linear_value_head_dim", t.linear_value_head_dim},
               {"max_position_embeddings", 262144},
               {"model_type", "qwen3_5_text"},
               {"mrope_section", mrope},
               {"num_attention_heads", t.num_attention_heads},
               {"num_hidden_layers", t.num_hidden_layers},
               {"num_key_value_heads", t.num_key_value_heads},
               {"pad_token_id", nullptr},
               {"partial_rotary_factor", t.partial_rotary_factor},
               {"rms_norm_eps", t.rms_norm_eps},
               {"rope_parameters",
                {{"mrope_interleaved", true},
                 {"mrope_section", mrope},
                 {"partial_rotary_factor", t.partial_rotary_factor},
                 {"rope_theta", t.rope_theta},
                 {"rope_type", "default"}}},
               {"tie_word_embeddings", false},
               {"use_cache", true},
               {"vocab_size", t.vocab_size}};
  return json{{"architectures", {"Qwen3_5ForConditionalGeneration"}},
              {"dtype", "bfloat16"},
              {"image_token_id", 248056},
              {"initializer_range", 0.02},
              {"model_type", "qwen3_5"},
              {"text_config", text},
              {"tie_word_embeddings", false},
              {"transformers_version", "5.17.0"},
              {"video_token_id", 248057},
              {"vision_config", vision_config_json(v)},
              {"vision_end_token_id", 248054},
              {"vision_start_token_id", 248053}};
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw std::runtime_error(path.string() + ": write failed");
}

// max id + 1 over the BPE vocab and the added tokens.
size_t tokenizer_vocab(std::string_view tokenizer_json, const std::string& where) {
  json j = json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model") || !j["model"].is_object() ||
      !j["model"].contains("vocab") || !j["model"]["vocab"].is_object()) {
    throw std::runtime_error(where + ": not a tokenizer.json (no model.vocab)");
  }
  int64_t mx = -1;
  for (const auto& [tok, id] : j["model"]["vocab"].items()) {
    if (id.is_number_integer()) mx = std::max(mx, id.get<int64_t>());
  }
  // HF renumbers added tokens that are not in the vocab after it (see Tokenizer::vocab_size).
  int64_t next = mx + 1;
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& a : j["added_tokens"]) {
      if (a.is_object() && a.contains("content") && a["content"].is_string() &&
          !j["model"]["vocab"].contains(a["content"].get<std::string>())) {
        ++next;
      }
    }
  }
  return static_cast<size_t>(std::max(next, mx + 1));
}

// Fills bf16 elements [first, first + count) of a planned tensor, on `threads` threads.
void fill_bf16(const PlannedTensor& p, uint64_t first, size_t count, uint8_t* dst, int threads) {
  auto put = [dst](size_t k, float v) {
    uint16_t b = float_to_bf16(v);
    std::memcpy(dst + 2 * k, &b, 2);
  };
  auto work = [&](size_t a, size_t b) {
    if (p.init != Init::Normal) {
      for (size_t k = a; k < b; ++k) put(k, init_value(p, first + k));
      return;
    }
    size_t k = a;
    if (k < b && ((first + k) & 1)) {  // odd start: the second half of a pair
      put(k, init_value(p, first + k));
      ++k;
    }
    for (; k + 1 < b; k += 2) {  // whole pairs: one draw, two elements
      float z0, z1;
      normal_pair(p.key, (first + k) >> 1, z0, z1);
      put(k, z0);
      put(k + 1, z1);
    }
    if (k < b) put(k, init_value(p, first + k));
  };
  if (threads <= 1 || count < (size_t{1} << 16) || p.init == Init::Zeros || p.init == Init::Ones) {
    work(0, count);
    return;
  }
  std::vector<std::thread> pool;
  size_t per = (count + threads - 1) / threads;
  for (int t = 1; t < threads; ++t) {
    size_t a = std::min(count, per * t), b = std::min(count, per * (t + 1));
    if (a < b) pool.emplace_back(work, a, b);
  }
  work(0, std::min(count, per));
  for (auto& th : pool) th.join();
}

void write_planned(const std::string& path, const std::vector<PlannedTensor>& plan, int threads) {
  std::vector<TensorSpec> specs;
  for (const PlannedTensor& p : plan) specs.push_back(p.spec);
  write_safetensors(path, specs, {{"format", "pt"}},
                    [&](size_t i, size_t off, uint8_t* dst, size_t n) {
                      if (off % 2 || n % 2) throw std::logic_error("make-model: odd bf16 chunk");
                      fill_bf16(plan[i], off / 2, n / 2, dst, threads);
                    });
}

std::string gb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

}  // namespace

namespace {
void write_release(const fs::path& tmp, const MakeModelOptions& opts, ModelPreset preset,
                   const std::string& tok_json, const std::string& tok_config, int threads,
                   const std::function<void(const std::string&)>& progress);
}  // namespace

std::vector<std::string> make_model_presets() {
  return {"tiny", "small", "flash", "clef"};
}

ModelPreset make_model_preset(const std::string& name) {
  // text_config(H, L, I, heads, kv heads, head_dim, GDN key heads, value heads, dk, dv, vocab)
  // vision_config(depth, width, MLP, heads, position rows, out): tiny-r2's tower for the test
  // presets, Qwen3.5's (docs/spec/media.md §7) for the real ones.
  if (name == "tiny") {  // tiny-r2's shapes
    return {text_config(64, 8, 128, 4, 2, 32, 2, 4, 16, 16, 0), head_config(64, 32, 2, 2, 4, 64),
            vision_config(1, 32, 64, 2, 64, 64)};
  }
  if (name == "small") {  // ~0.45B without embeddings, real head/state geometry, for CPU smoke runs
    return {text_config(1024, 16, 4096, 8, 2, 256, 8, 16, 128, 128, 0),
            head_config(1024, 1024, 2, 4, 16, 4096), vision_config(1, 32, 64, 2, 64, 1024)};
  }
  if (name == "flash") {  // Clef-flash (Qwen3.5-9B backbone)
    return {text_config(4096, 32, 12288, 16, 4, 256, 16, 32, 128, 128, kRealVocab),
            head_config(4096, 1024, 2, 4, 16, 4096), vision_config(27, 1152, 4304, 16, 2304, 4096)};
  }
  if (name == "clef") {  // Clef (27B backbone)
    return {text_config(5120, 64, 17408, 24, 4, 256, 16, 48, 128, 128, kRealVocab),
            head_config(5120, 1024, 2, 4, 16, 4096), vision_config(27, 1152, 4304, 16, 2304, 5120)};
  }
  throw std::invalid_argument("unknown preset \"" + name + "\" (tiny, small, flash, clef)");
}

void make_model(const MakeModelOptions& opts) {
  auto progress = [&](const std::string& s) {
    if (opts.progress) opts.progress(s);
  };
  if (opts.out_dir.empty()) throw std::runtime_error("make-model: no output folder");
  ModelPreset preset = make_model_preset(opts.preset);
  const int threads = opts.threads > 0
                          ? opts.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  // Tokenizer files: the given ones, or the embedded tiny-bpe.
  std::string tok_json, tok_config;
  if (opts.tokenizer.empty()) {
    tok_json = std::string(embedded::tokenizer_json());
    tok_config = std::string(embedded::tokenizer_config_json());
  } else {
    fs::path p(opts.tokenizer);
    fs::path dir = fs::is_directory(p) ? p : p.parent_path();
    fs::path file = fs::is_directory(p) ? p / "tokenizer.json" : p;
    try {
      tok_json = read_text_file(file.string());
      fs::path cfg = dir / "tokenizer_config.json";
      tok_config = fs::exists(cfg) ? read_text_file(cfg.string())
                                   : std::string(embedded::tokenizer_config_json());
    } catch (const LoadError& e) {
      throw std::runtime_error(e.what());
    }
  }
  size_t tok_vocab =
      tokenizer_vocab(tok_json, opts.tokenizer.empty() ? "embedded tokenizer" : opts.tokenizer);
  TextConfig& t = preset.text;
  if (t.vocab_size == 0) {
    t.vocab_size = static_cast<int>(std::max<size_t>(64, (tok_vocab + 63) / 64 * 64));
  } else if (tok_vocab > static_cast<size_t>(t.vocab_size)) {
    throw std::runtime_error("make-model: the tokenizer has " + std::to_string(tok_vocab) +
                             " ids, more than the preset's vocab_size " +
                             std::to_string(t.vocab_size));
  }

  fs::path out(opts.out_dir);
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)) &&
      !opts.overwrite) {
    throw std::runtime_error("make-model: " + out.string() +
                             " exists and is not empty (use --force)");
  }
  // A private staging folder: a concurrent make-model of the same out_dir cannot clobber it, and a
  // failure leaves no half-written release behind.
  fs::path tmp = out.string() + ".partial-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) {
    throw std::runtime_error("make-model: cannot create " + tmp.string() + ": " + ec.message());
  }
  try {
    write_release(tmp, opts, preset, tok_json, tok_config, threads, progress);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  if (opts.overwrite && fs::exists(out, ec)) fs::remove_all(out, ec);
  fs::rename(tmp, out, ec);
  if (ec) {
    fs::remove_all(tmp, ec);
    throw std::runtime_error("make-model: cannot rename the staging folder to " + out.string() +
                             " (made concurrently?)");
  }
  progress("wrote " + out.string());
}

namespace {

void write_release(const fs::path& tmp, const MakeModelOptions& opts, ModelPreset preset,
                   const std::string& tok_json, const std::string& tok_config, int threads,
                   const std::function<void(const std::string&)>& progress) {
  const TextConfig& t = preset.text;
  write_text(tmp / "config.json", config_json(t, preset.vision).dump(2) + "\n");
  write_text(tmp / "processor_config.json", processor_config_json(preset.vision).dump(2) + "\n");
  write_text(tmp / "generation_config.json", json{{"_from_model_config", true},
                                                  {"output_attentions", false},
                                                  {"output_hidden_states", false},
                                                  {"transformers_version", "5.17.0"},
                                                  {"use_cache", true}}
                                                     .dump(2) +
                                                 "\n");
  const HeadConfig& h = preset.head;
  write_text(tmp / "joint_head_config.json", json{{"hidden_size", h.hidden_size},
                                                  {"width", h.width},
                                                  {"routing_layers", h.routing_layers},
                                                  {"layers", h.layers},
                                                  {"heads", h.heads},
                                                  {"feedforward", h.feedforward}}
                                                 .dump());
  write_text(tmp / "tokenizer.json", tok_json);
  write_text(tmp / "tokenizer_config.json", tok_config);

  // Backbone plan, stored names sorted as HF's save_pretrained writes them.
  std::vector<PlannedTensor> backbone;
  for (TensorSpec s : backbone_tensor_specs(t)) {
    Init init = backbone_init(s.name);
    if (s.name != "lm_head.weight") s.name = "model.language_model." + s.name;
    backbone.push_back({s, init, tensor_key(opts.seed, s.name)});
  }
  for (TensorSpec s : vision_tensor_specs(preset.vision)) {
    s.name = "model.visual." + s.name;
    backbone.push_back({s, layer_norm_style_init(s.name), tensor_key(opts.seed, s.name)});
  }
  std::sort(backbone.begin(), backbone.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
    return a.spec.name < b.spec.name;
  });
  std::vector<std::vector<PlannedTensor>> shards(1);
  uint64_t shard_size = 0, total = 0;
  for (const PlannedTensor& p : backbone) {
    uint64_t n = p.spec.nbytes();
    if (shard_size > 0 && shard_size + n > opts.shard_bytes) {
      shards.emplace_back();
      shard_size = 0;
    }
    shards.back().push_back(p);
    shard_size += n;
    total += n;
  }
  if (shards.size() == 1) {
    progress("writing model.safetensors (" + gb(total) + ")");
    write_planned((tmp / "model.safetensors").string(), shards[0], threads);
  } else {
    json weight_map = json::object();
    char name[64];
    for (size_t i = 0; i < shards.size(); ++i) {
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      uint64_t bytes = 0;
      for (const PlannedTensor& p : shards[i]) {
        weight_map[p.spec.name] = name;
        bytes += p.spec.nbytes();
      }
      progress(std::string("writing ") + name + " (" + gb(bytes) + ")");
      write_planned((tmp / name).string(), shards[i], threads);
    }
    write_text(
        tmp / "model.safetensors.index.json",
        json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n");
  }

  std::vector<PlannedTensor> head;
  for (const TensorSpec& s : head_tensor_specs(h)) {
    Init init = s.shape.empty() ? Init::Zeros : layer_norm_style_init(s.name);
    head.push_back({s, init, tensor_key(opts.seed, "joint_head." + s.name)});
  }
  std::sort(head.begin(), head.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
    return a.spec.name < b.spec.name;
  });
  progress("writing joint_head.safetensors");
  write_planned((tmp / "joint_head.safetensors").string(), head, threads);
}

}  // namespace

}  // namespace clef::model

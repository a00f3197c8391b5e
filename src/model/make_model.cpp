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
#include "model/fp8.h"
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

// Normal: N(0, 0.02²). Heavy: the realistic recipe's heavy-tailed weights (see heavy_value). Gain:
// per-channel values listed in the plan (the realistic recipe's norm weights).
enum class Init { Normal, Zeros, Ones, ALog, Heavy, Gain };

struct PlannedTensor {
  TensorSpec spec;  // name as stored in the file
  Init init = Init::Normal;
  uint64_t key = 0;
  int64_t cols = 1;               // row length (Heavy: the row/column of element i)
  std::vector<int64_t> outliers;  // Heavy: sorted rows scaled by outlier_scale
  float outlier_scale = 1.0f;
  std::vector<float> gains;      // Gain: element i is gains[i]
  std::vector<float> col_scale;  // Heavy: per-column factor (empty = 1)
  float std_scale = 1.0f;        // Heavy: overall factor
  // FP8 (make-model --dtype fp8): `fp8` marks an F8_E4M3 weight quantised from the bf16 values its
  // `source` plan gives; `scale_of` marks the F32 scale_inv grid of that weight.
  bool fp8 = false, scale_of = false;
  std::shared_ptr<const PlannedTensor> source;
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

// A standard normal from one counter (the cos half of a draw).
inline float std_normal(uint64_t key, uint64_t j) {
  float z0, z1;
  normal_pair(key, j, z0, z1);
  return z0 * 50.0f;
}

// ---- the realistic recipe (make-model --weights realistic; docs/engine.md "Realistic weights")
// Trained LLMs have heavy-tailed weights, a spread of per-channel scales, and a few activation
// channels 20-100x larger than the rest, in the same channels at every layer; i.i.d. Gaussian
// weights have none of this and flatter any quantiser.
constexpr float kTailSigma = 0.5f;      // weights: N(0,1) * exp(0.5 N(0,1)): kurtosis 3e = 8.2
constexpr float kChannelSigma = 0.25f;  // per-row and per-column log-normal scale spread
constexpr float kGainSigma = 0.4f;      // norm gains: log-normal spread
constexpr float kOutlierLo = 20.0f, kOutlierHi = 100.0f;  // outlier channel gains (log-uniform)
constexpr float kOutlierRowScale = 8.0f;  // up_proj / v_proj outlier rows (SwiGLU, attn outliers)

inline float log_normal(uint64_t key, uint64_t j, float sigma) {
  return std::exp(sigma * std_normal(key, j) - 0.5f * sigma * sigma);
}

// Heavy element i of a [rows, cols] weight: 0.02 · z · exp(σ_t y - σ_t²) (unit variance scale
// mixture) · row scale · column scale, outlier rows further scaled.
inline float heavy_value(const PlannedTensor& p, uint64_t i) {
  float z0, z1;
  normal_pair(p.key, i, z0, z1);
  const uint64_t r = i / static_cast<uint64_t>(p.cols), c = i % static_cast<uint64_t>(p.cols);
  float v = z0 * std::exp(kTailSigma * z1 * 50.0f - kTailSigma * kTailSigma) *
            log_normal(p.key ^ 0x5257ull, r, kChannelSigma) *
            log_normal(p.key ^ 0x434full, c, kChannelSigma);
  if (!p.outliers.empty() &&
      std::binary_search(p.outliers.begin(), p.outliers.end(), static_cast<int64_t>(r)))
    v *= p.outlier_scale;
  if (!p.col_scale.empty()) v *= p.col_scale[c];
  return v * p.std_scale;
}

// `count` distinct indices in [0, n), sorted, from `key`.
std::vector<int64_t> pick_channels(uint64_t key, int64_t n, int64_t count) {
  std::vector<int64_t> out;
  for (uint64_t j = 0; static_cast<int64_t>(out.size()) < std::min(count, n); ++j) {
    const int64_t c = static_cast<int64_t>(mix(key + j) % static_cast<uint64_t>(n));
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t outlier_count(int64_t n) {
  return std::max<int64_t>(2, n / 256);
}

// Per-channel gains: log-normal spread, the `outliers` channels 20-100x (log-uniform).
std::vector<float> gains(uint64_t key, int64_t n, const std::vector<int64_t>& outliers) {
  std::vector<float> g(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) g[c] = log_normal(key, static_cast<uint64_t>(c), kGainSigma);
  for (size_t k = 0; k < outliers.size(); ++k) {
    const double u = static_cast<double>(mix((key ^ 0x4f55ull) + k) >> 11) * 0x1.0p-53;
    g[outliers[k]] = static_cast<float>(kOutlierLo * std::pow(kOutlierHi / kOutlierLo, u));
  }
  return g;
}

// Element i of a tensor (before bf16 rounding).
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
    case Init::Heavy:
      return heavy_value(p, i);
    case Init::Gain:
      return p.gains[i];
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
// The backbone projections an FP8 release stores in e4m3 (Qwen's FP8 releases keep the embeddings,
// lm_head, norms, conv1d, A_log, dt_bias and the small GDN in_proj_a / in_proj_b in bf16).
bool fp8_projection(const std::string& canonical) {
  static const char* kNames[] = {"linear_attn.in_proj_qkv.weight",
                                 "linear_attn.in_proj_z.weight",
                                 "linear_attn.out_proj.weight",
                                 "self_attn.q_proj.weight",
                                 "self_attn.k_proj.weight",
                                 "self_attn.v_proj.weight",
                                 "self_attn.o_proj.weight",
                                 "mlp.gate_proj.weight",
                                 "mlp.up_proj.weight",
                                 "mlp.down_proj.weight"};
  if (canonical.rfind("layers.", 0) != 0) return false;
  for (const char* n : kNames) {
    const std::string k = n;
    if (canonical.size() > k.size() &&
        canonical.compare(canonical.size() - k.size(), k.size(), k) == 0 &&
        canonical[canonical.size() - k.size() - 1] == '.')
      return true;
  }
  return false;
}

json quantization_config_json(const TextConfig& t) {
  json keep = {"lm_head", "model.language_model.embed_tokens", "model.visual"};
  for (size_t i = 0; i < t.layer_types.size(); ++i) {
    if (t.layer_types[i] != LayerType::LinearAttention) continue;
    const std::string p = "model.language_model.layers." + std::to_string(i) + ".linear_attn.";
    keep.push_back(p + "in_proj_a");
    keep.push_back(p + "in_proj_b");
  }
  return json{{"activation_scheme", "dynamic"},
              {"fmt", "e4m3"},
              {"modules_to_not_convert", keep},
              {"quant_method", "fp8"},
              {"weight_block_size", {kFp8Block, kFp8Block}}};
}

// The vision tokens' ids (docs/spec/media.md §6) by their text in the tokenizer's added tokens, so
// that a release made with any Qwen tokenizer takes media (Qwen3's own tokenizer has them at
// 151652..151656); Qwen3.5's ids when the tokenizer has none of them (then media are refused: the
// ids are outside its vocabulary).
struct VisionTokenIds {
  int64_t start = 248053, end = 248054, image = 248056, video = 248057;
};

VisionTokenIds vision_token_ids(std::string_view tokenizer_json) {
  VisionTokenIds ids;
  const json j = json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr, false);
  if (j.is_discarded() || !j.contains("added_tokens") || !j["added_tokens"].is_array()) return ids;
  VisionTokenIds found{-1, -1, -1, -1};
  for (const json& a : j["added_tokens"]) {
    if (!a.is_object() || !a.contains("content") || !a["content"].is_string() ||
        !a.contains("id") || !a["id"].is_number_integer())
      continue;
    const std::string c = a["content"].get<std::string>();
    const int64_t id = a["id"].get<int64_t>();
    if (c == "<|vision_start|>") found.start = id;
    if (c == "<|vision_end|>") found.end = id;
    if (c == "<|image_pad|>") found.image = id;
    if (c == "<|video_pad|>") found.video = id;
  }
  if (found.start >= 0 && found.end >= 0 && found.image >= 0 && found.video >= 0) return found;
  return ids;
}

json config_json(const TextConfig& t, const VisionConfig& v, const VisionTokenIds& ids) {
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
              {"image_token_id", ids.image},
              {"initializer_range", 0.02},
              {"model_type", "qwen3_5"},
              {"text_config", text},
              {"tie_word_embeddings", false},
              {"transformers_version", "5.17.0"},
              {"video_token_id", ids.video},
              {"vision_config", vision_config_json(v)},
              {"vision_end_token_id", ids.end},
              {"vision_start_token_id", ids.start}};
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

// Runs work(a, b) over [0, count) on up to `threads` threads.
template <typename Work>
void parallel_for(size_t count, int threads, const Work& work) {
  if (threads <= 1 || count < (size_t{1} << 16)) {
    work(size_t{0}, count);
    return;
  }
  std::vector<std::thread> pool;
  size_t per = (count + threads - 1) / threads;
  per += per & 1;  // even split points keep Normal's pairs together
  for (int t = 1; t < threads; ++t) {
    size_t a = std::min(count, per * t), b = std::min(count, per * (t + 1));
    if (a < b) pool.emplace_back([&work, a, b] { work(a, b); });
  }
  work(size_t{0}, std::min(count, per));
  for (auto& th : pool) th.join();
}

// Elements [first, first + count) of a planned tensor, bf16-rounded (what the bf16 release holds),
// into out.
void source_values(const PlannedTensor& p, uint64_t first, size_t count, float* out, int threads) {
  auto work = [&](size_t a, size_t b) {
    if (p.init != Init::Normal) {
      for (size_t k = a; k < b; ++k) out[k] = round_to_bf16(init_value(p, first + k));
      return;
    }
    size_t k = a;
    if (k < b && ((first + k) & 1)) {  // odd start: the second half of a pair
      out[k] = round_to_bf16(init_value(p, first + k));
      ++k;
    }
    for (; k + 1 < b; k += 2) {  // whole pairs: one draw, two elements
      float z0, z1;
      normal_pair(p.key, (first + k) >> 1, z0, z1);
      out[k] = round_to_bf16(z0);
      out[k + 1] = round_to_bf16(z1);
    }
    if (k < b) out[k] = round_to_bf16(init_value(p, first + k));
  };
  if (p.init == Init::Zeros || p.init == Init::Ones) threads = 1;
  parallel_for(count, threads, work);
}

constexpr size_t kPiece = size_t{1} << 20;  // elements generated per step (bounded scratch)

void fill_bf16(const PlannedTensor& p, uint64_t first, size_t count, uint8_t* dst, int threads) {
  std::vector<float> buf(std::min(count, kPiece));
  for (size_t done = 0; done < count; done += buf.size()) {
    const size_t m = std::min(buf.size(), count - done);
    source_values(p, first + done, m, buf.data(), threads);
    for (size_t k = 0; k < m; ++k) {
      const uint16_t b = float_to_bf16(buf[k]);
      std::memcpy(dst + 2 * (done + k), &b, 2);
    }
  }
}

// One 128-row block row of an FP8 weight: its bf16 source values, per 128x128 block
// scale_inv = amax / 448 (1 for an all-zero block), codes = e4m3(value / scale_inv). codes may be
// null (the scale grid only).
void quantize_block_row(const PlannedTensor& w, int64_t block_row, std::vector<float>& scratch,
                        uint8_t* codes, float* scales, int threads) {
  const int64_t N = w.spec.shape[0], K = w.spec.shape[1], B = kFp8Block;
  const int64_t r0 = block_row * B, rows = std::min(B, N - r0), nb = (K + B - 1) / B;
  scratch.resize(static_cast<size_t>(rows * K));
  source_values(w, static_cast<uint64_t>(r0 * K), scratch.size(), scratch.data(), threads);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t c0 = b * B, c1 = std::min(K, c0 + B);
    float amax = 0.0f;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(scratch[r * K + c]));
    const float s = fp8_block_scale(amax);
    scales[b] = s;
    if (!codes) continue;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) codes[r * K + c] = float_to_e4m3(scratch[r * K + c] / s);
  }
}

void fill_fp8(const PlannedTensor& p, size_t off, size_t n, uint8_t* dst, int threads) {
  const PlannedTensor& w = *p.source;
  const int64_t K = w.spec.shape[1], B = kFp8Block, nb = (K + B - 1) / B;
  std::vector<float> scratch, scales(static_cast<size_t>(nb));
  std::vector<uint8_t> codes;
  // Element ranges: codes are 1 byte each, scales 4.
  const size_t es = p.scale_of ? 4 : 1, first = off / es, count = n / es;
  const size_t row_elems = p.scale_of ? static_cast<size_t>(nb) : static_cast<size_t>(B * K);
  for (size_t e = first; e < first + count;) {
    const int64_t br = static_cast<int64_t>(e / row_elems);
    const size_t in_row = e % row_elems, take = std::min(row_elems - in_row, first + count - e);
    if (p.scale_of) {
      quantize_block_row(w, br, scratch, nullptr, scales.data(), threads);
      std::memcpy(dst + (e - first) * 4, scales.data() + in_row, take * 4);
    } else {
      codes.resize(static_cast<size_t>(std::min(B, w.spec.shape[0] - br * B) * K));
      quantize_block_row(w, br, scratch, codes.data(), scales.data(), threads);
      std::memcpy(dst + (e - first), codes.data() + in_row, take);
    }
    e += take;
  }
}

void write_planned(const std::string& path, const std::vector<PlannedTensor>& plan, int threads) {
  std::vector<TensorSpec> specs;
  for (const PlannedTensor& p : plan) specs.push_back(p.spec);
  write_safetensors(path, specs, {{"format", "pt"}},
                    [&](size_t i, size_t off, uint8_t* dst, size_t n) {
                      const PlannedTensor& p = plan[i];
                      if (p.fp8 || p.scale_of) {
                        if (p.scale_of && (off % 4 || n % 4))
                          throw std::logic_error("make-model: unaligned scale chunk");
                        fill_fp8(p, off, n, dst, threads);
                        return;
                      }
                      if (off % 2 || n % 2) throw std::logic_error("make-model: odd bf16 chunk");
                      fill_bf16(p, off / 2, n / 2, dst, threads);
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
  if (opts.adjust_preset) opts.adjust_preset(preset);
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

// The realistic recipe's plan for one backbone tensor (canonical name); `hidden_outliers` are the
// residual-stream channels whose norm gains are 20-100x, shared by every layer as in trained
// models.
void make_realistic(PlannedTensor& p, const std::string& canonical, const TextConfig& t,
                    uint64_t seed, const std::vector<int64_t>& hidden_outliers,
                    const std::vector<int64_t>& head_dim_outliers) {
  auto ends = [&](const std::string& s) {
    return canonical.size() >= s.size() &&
           canonical.compare(canonical.size() - s.size(), s.size(), s) == 0;
  };
  // The gains of a layer's norm (the same values its tensor plan gets).
  auto norm_gains = [&](const std::string& norm) {
    const std::string layer = canonical.substr(0, canonical.find('.', 7) + 1);  // "layers.N."
    return gains(tensor_key(seed, "model.language_model." + layer + norm), t.hidden_size,
                 hidden_outliers);
  };
  if (ends("input_layernorm.weight") || ends("post_attention_layernorm.weight")) {
    p.init = Init::Gain;  // RMSNorm(1 + w): w = gain - 1
    p.gains = gains(p.key, t.hidden_size, hidden_outliers);
    for (float& g : p.gains) g -= 1.0f;
  } else if (ends("linear_attn.norm.weight")) {
    p.init = Init::Gain;  // gated RMSNorm: plain · w, the same channels in every value head
    p.gains = gains(p.key, t.linear_value_head_dim, head_dim_outliers);
  } else if (p.init == Init::Normal && p.spec.shape.size() == 2) {
    p.init = Init::Heavy;
    p.cols = p.spec.shape[1];
    if (ends("mlp.up_proj.weight") || ends("self_attn.v_proj.weight")) {
      p.outliers =
          pick_channels(p.key ^ 0x524full, p.spec.shape[0], outlier_count(p.spec.shape[0]));
      p.outlier_scale = kOutlierRowScale;
    }
    // Projections reading a normed hidden state: the columns of large-gain channels are smaller
    // (1 / sqrt(gain)), as trained models partly compensate their outliers; the outlier channels
    // still dominate the products, and a 128x128 block then mixes columns of different scales.
    const char* norm = nullptr;
    if (ends("mlp.gate_proj.weight") || ends("mlp.up_proj.weight")) {
      norm = "post_attention_layernorm.weight";
    } else if (canonical.find("linear_attn.in_proj_") != std::string::npos ||
               ends("self_attn.q_proj.weight") || ends("self_attn.k_proj.weight") ||
               ends("self_attn.v_proj.weight")) {
      norm = "input_layernorm.weight";
    }
    if (norm && canonical.rfind("layers.", 0) == 0) {
      p.col_scale = norm_gains(norm);
      for (float& g : p.col_scale) g = 1.0f / std::sqrt(g);
    }
    // Output projections: GPT-2's 1/sqrt(2L) keeps the residual stream from growing layer by layer.
    if (ends("mlp.down_proj.weight") || ends("linear_attn.out_proj.weight") ||
        ends("self_attn.o_proj.weight"))
      p.std_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(t.num_hidden_layers));
  }
}

void write_release(const fs::path& tmp, const MakeModelOptions& opts, ModelPreset preset,
                   const std::string& tok_json, const std::string& tok_config, int threads,
                   const std::function<void(const std::string&)>& progress) {
  const TextConfig& t = preset.text;
  if (opts.dtype != "bf16" && opts.dtype != "fp8")
    throw std::runtime_error("make-model: --dtype must be bf16 or fp8, got \"" + opts.dtype + "\"");
  if (opts.weights != "gaussian" && opts.weights != "realistic") {
    throw std::runtime_error("make-model: --weights must be gaussian or realistic, got \"" +
                             opts.weights + "\"");
  }
  const bool fp8 = opts.dtype == "fp8", realistic = opts.weights == "realistic";
  json config = config_json(t, preset.vision, vision_token_ids(tok_json));
  if (fp8) config["quantization_config"] = quantization_config_json(t);
  write_text(tmp / "config.json", config.dump(2) + "\n");
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
  const std::vector<int64_t> hidden_outliers =
      pick_channels(tensor_key(opts.seed, "realistic.hidden_outliers"), t.hidden_size,
                    outlier_count(t.hidden_size));
  const std::vector<int64_t> head_dim_outliers =
      pick_channels(tensor_key(opts.seed, "realistic.head_dim_outliers"), t.linear_value_head_dim,
                    outlier_count(t.linear_value_head_dim));
  for (TensorSpec s : backbone_tensor_specs(t)) {
    const std::string canonical = s.name;
    Init init = backbone_init(s.name);
    if (s.name != "lm_head.weight") s.name = "model.language_model." + s.name;
    PlannedTensor p;
    p.spec = s;
    p.init = init;
    p.key = tensor_key(opts.seed, s.name);
    if (realistic) make_realistic(p, canonical, t, opts.seed, hidden_outliers, head_dim_outliers);
    if (fp8 && fp8_projection(canonical)) {
      auto src = std::make_shared<const PlannedTensor>(p);
      PlannedTensor w;
      w.spec = {s.name, DType::F8_E4M3, s.shape};
      w.fp8 = true;
      w.source = src;
      PlannedTensor sc;
      sc.spec = {
          s.name + "_scale_inv",
          DType::F32,
          {(s.shape[0] + kFp8Block - 1) / kFp8Block, (s.shape[1] + kFp8Block - 1) / kFp8Block}};
      sc.scale_of = true;
      sc.source = src;
      backbone.push_back(std::move(w));
      backbone.push_back(std::move(sc));
      continue;
    }
    backbone.push_back(std::move(p));
  }
  for (TensorSpec s : vision_tensor_specs(preset.vision)) {
    s.name = "model.visual." + s.name;
    PlannedTensor p;
    p.spec = s;
    p.init = layer_norm_style_init(s.name);
    p.key = tensor_key(opts.seed, s.name);
    backbone.push_back(std::move(p));
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
    PlannedTensor p;
    p.spec = s;
    p.init = init;
    p.key = tensor_key(opts.seed, "joint_head." + s.name);
    head.push_back(std::move(p));
  }
  std::sort(head.begin(), head.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
    return a.spec.name < b.spec.name;
  });
  progress("writing joint_head.safetensors");
  write_planned((tmp / "joint_head.safetensors").string(), head, threads);
}

}  // namespace

}  // namespace clef::model

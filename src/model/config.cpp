// Config parsing: strict about what changes the math (text, vision tower), tolerant of keys that
// do not (generation, token ids).
#include "model/config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

namespace clef::model {

namespace {

using nlohmann::json;

// Far above any real model; keeps a corrupt count from allocating billions of expected tensors.
constexpr int kMaxLayers = 4096;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw LoadError(path + ": " + what);
}

json parse_object(std::string_view text, const std::string& path) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) fail(path, "not valid JSON");
  if (!j.is_object()) fail(path, "not a JSON object");
  return j;
}

const json* find(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

int get_int(const json& obj, const char* key, const std::string& path, int min_value,
            std::optional<int> dflt = std::nullopt) {
  const json* v = find(obj, key);
  if (!v) {
    if (dflt) return *dflt;
    fail(path, std::string("missing \"") + key + "\"");
  }
  if (!v->is_number_integer() || v->get<int64_t>() < min_value || v->get<int64_t>() > (1 << 30)) {
    fail(path, std::string("\"") + key + "\" must be an integer >= " + std::to_string(min_value) +
                   ", got " + v->dump());
  }
  return static_cast<int>(v->get<int64_t>());
}

double get_number(const json& obj, const char* key, const std::string& path) {
  const json* v = find(obj, key);
  if (!v || !v->is_number()) fail(path, std::string("\"") + key + "\" must be a number");
  double d = v->get<double>();
  if (!std::isfinite(d)) fail(path, std::string("\"") + key + "\" must be finite");
  return d;
}

void parse_rope(const json& tc, TextConfig& t, const std::string& path) {
  const json* rp = find(tc, "rope_parameters");
  const json* src = &tc;
  if (rp) {
    if (!rp->is_object()) fail(path, "\"rope_parameters\" must be an object");
    src = rp;
  } else if (const json* rs = find(tc, "rope_scaling")) {
    // Older configs: rope_scaling null or {"type"/"rope_type": "default"} means plain RoPE.
    if (!rs->is_object()) fail(path, "\"rope_scaling\" must be an object");
    rp = rs;
  }
  if (rp) {
    std::string type = "default";
    if (const json* ty = find(*rp, "rope_type")) {
      type = ty->is_string() ? ty->get<std::string>() : ty->dump();
    } else if (const json* ty2 = find(*rp, "type")) {
      type = ty2->is_string() ? ty2->get<std::string>() : ty2->dump();
    }
    if (type != "default")
      fail(path, "rope type \"" + type + "\" is not implemented (only \"default\")");
  }
  auto pick = [&](const char* key) -> const json& {
    if (find(*src, key)) return *src;
    if (find(tc, key)) return tc;
    fail(path, std::string("missing \"") + key + "\" (in rope_parameters or the text config)");
  };
  t.rope_theta = get_number(pick("rope_theta"), "rope_theta", path);
  if (t.rope_theta <= 0) fail(path, "\"rope_theta\" must be positive");
  t.partial_rotary_factor =
      get_number(pick("partial_rotary_factor"), "partial_rotary_factor", path);
  double rd = t.head_dim * t.partial_rotary_factor;
  if (!(t.partial_rotary_factor > 0 && t.partial_rotary_factor <= 1) || rd != std::floor(rd) ||
      static_cast<int64_t>(rd) % 2 != 0) {
    fail(path, "partial_rotary_factor " + std::to_string(t.partial_rotary_factor) +
                   " does not give an even number of rotary dims for head_dim " +
                   std::to_string(t.head_dim));
  }
  // Multimodal RoPE: which of the rd/2 frequencies take the height and width positions. The
  // interleaved split needs no exact sum (HF's apply_interleaved_mrope only bounds the height and
  // width runs; the rest stay temporal).
  const json* ms = find(*src, "mrope_section");
  if (!ms) ms = find(tc, "mrope_section");
  if (ms) {
    bool ok = ms->is_array() && ms->size() == 3;
    for (size_t i = 0; ok && i < 3; ++i) {
      const json& e = (*ms)[i];
      ok = e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() <= (1 << 20);
      if (ok) t.mrope_section.push_back(static_cast<int>(e.get<int64_t>()));
    }
    if (!ok) fail(path, "\"mrope_section\" must be 3 non-negative integers, got " + ms->dump());
  }
  const json* mi = find(*src, "mrope_interleaved");
  if (!mi) mi = find(tc, "mrope_interleaved");
  if (mi && *mi != true) {
    // Qwen3.5's text rotary embedding always interleaves; a blocked split is another model.
    fail(path, "mrope_interleaved " + mi->dump() + " is not implemented (only true)");
  }
}

// `vision_config` (docs/spec/media.md §7): strict about everything the tower's math depends on.
VisionConfig parse_vision(const json& vc, const std::string& path) {
  const std::string where = path + " vision_config";
  if (!vc.is_object()) fail(path, "\"vision_config\" must be an object");
  if (const json* mt = find(vc, "model_type")) {
    std::string m = mt->is_string() ? mt->get<std::string>() : mt->dump();
    if (m != "qwen3_5_vision") {
      fail(where, "model_type \"" + m + "\" is not supported (qwen3_5_vision)");
    }
  }
  if (const json* act = find(vc, "hidden_act"); act && *act != "gelu_pytorch_tanh") {
    fail(where, "hidden_act " + act->dump() + " is not implemented (only \"gelu_pytorch_tanh\")");
  }
  if (const json* ds = find(vc, "deepstack_visual_indexes");
      ds && !(ds->is_array() && ds->empty())) {
    fail(where, "deepstack_visual_indexes " + ds->dump() + " is not implemented (only [])");
  }
  VisionConfig v;
  v.depth = get_int(vc, "depth", where, 1);
  if (v.depth > kMaxLayers) fail(where, "depth above " + std::to_string(kMaxLayers));
  v.hidden_size = get_int(vc, "hidden_size", where, 1);
  v.intermediate_size = get_int(vc, "intermediate_size", where, 1);
  v.num_heads = get_int(vc, "num_heads", where, 1);
  v.in_channels = get_int(vc, "in_channels", where, 1, 3);
  v.patch_size = get_int(vc, "patch_size", where, 1);
  v.temporal_patch_size = get_int(vc, "temporal_patch_size", where, 1);
  v.spatial_merge_size = get_int(vc, "spatial_merge_size", where, 1);
  v.out_hidden_size = get_int(vc, "out_hidden_size", where, 1);
  v.num_position_embeddings = get_int(vc, "num_position_embeddings", where, 1);
  // The processor's patch rows (3 x 2 x 16 x 16 values, 2 x 2 merge) are all this engine reads.
  if (v.in_channels != 3 || v.patch_size != 16 || v.temporal_patch_size != 2 ||
      v.spatial_merge_size != 2) {
    fail(where,
         "only in_channels 3, patch_size 16, temporal_patch_size 2 and spatial_merge_size "
         "2 are implemented (the Qwen3-VL processor's patches)");
  }
  if (v.hidden_size % v.num_heads != 0 || v.head_dim() % 4 != 0) {
    fail(where, "hidden_size " + std::to_string(v.hidden_size) + " over num_heads " +
                    std::to_string(v.num_heads) +
                    " must give a head_dim that is a multiple of 4 (2-D rotary embedding)");
  }
  const int side = static_cast<int>(std::lround(std::sqrt(v.num_position_embeddings)));
  if (side * side != v.num_position_embeddings) {
    fail(where, "num_position_embeddings " + std::to_string(v.num_position_embeddings) +
                    " is not a square (the learned position table is side x side)");
  }
  if (const json* rp = find(vc, "rope_parameters")) {
    if (!rp->is_object()) fail(where, "\"rope_parameters\" must be an object");
    if (find(*rp, "rope_theta")) v.rope_theta = get_number(*rp, "rope_theta", where);
  } else if (find(vc, "rope_theta")) {
    v.rope_theta = get_number(vc, "rope_theta", where);
  }
  if (v.rope_theta <= 0) fail(where, "\"rope_theta\" must be positive");
  return v;
}

// HF fine-grained FP8 exactly (transformers' FineGrainedFP8Config as Qwen's FP8 releases write it);
// any other method, format, block size or static activation scale changes the math, so it is
// refused by name.
QuantizationConfig parse_quantization(const json& q, const std::string& path) {
  const std::string where = "quantization_config";
  if (!q.is_object()) fail(path, "\"" + where + "\" must be an object");
  for (const auto& [k, v] : q.items()) {
    static const char* kKnown[] = {"quant_method", "fmt", "activation_scheme", "weight_block_size",
                                   "modules_to_not_convert"};
    bool known = false;
    for (const char* kk : kKnown) known = known || k == kk;
    if (!known)
      fail(path, where + ": unknown key \"" + k + "\" (only HF fine-grained FP8 is supported)");
  }
  auto str = [&](const char* key) -> std::string {
    const json* v = find(q, key);
    if (!v) return "";
    if (!v->is_string()) fail(path, where + "." + key + " must be a string, got " + v->dump());
    return v->get<std::string>();
  };
  const std::string method = str("quant_method");
  if (method != "fp8") {
    fail(path, where + ": quant_method \"" + method +
                   "\" is not supported (only HF fine-grained \"fp8\")");
  }
  if (const std::string fmt = str("fmt"); !fmt.empty() && fmt != "e4m3") {
    fail(path, where + ": fmt \"" + fmt + "\" is not supported (only \"e4m3\")");
  }
  if (const std::string act = str("activation_scheme"); !act.empty() && act != "dynamic") {
    fail(path, where + ": activation_scheme \"" + act +
                   "\" is not supported (only \"dynamic\": activations are quantised at run time)");
  }
  const json* bs = find(q, "weight_block_size");
  if (!bs || *bs != json::array({128, 128})) {
    fail(path, where + ": weight_block_size " + (bs ? bs->dump() : std::string("missing")) +
                   " is not supported (only [128, 128])");
  }
  QuantizationConfig out;
  out.fp8 = true;
  out.block = 128;
  if (const json* m = find(q, "modules_to_not_convert")) {
    if (!m->is_array()) fail(path, where + ".modules_to_not_convert must be a list of names");
    for (const json& n : *m) {
      if (!n.is_string() || n.get<std::string>().empty())
        fail(path, where + ".modules_to_not_convert: " + n.dump() + " is not a module name");
      out.modules_to_not_convert.push_back(n.get<std::string>());
    }
  }
  return out;
}

}  // namespace

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw LoadError(path + ": cannot open (missing file?)");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw LoadError(path + ": read error");
  return ss.str();
}

BackboneConfig parse_backbone_config(std::string_view config_json, const std::string& path) {
  json root = parse_object(config_json, path);
  const json* nested = find(root, "text_config");
  if (nested && !nested->is_object()) fail(path, "\"text_config\" must be an object");
  const json& tc = nested ? *nested : root;
  for (const json* obj : std::initializer_list<const json*>{&root, nested}) {
    if (!obj) continue;
    if (const json* mt = find(*obj, "model_type")) {
      std::string m = mt->is_string() ? mt->get<std::string>() : mt->dump();
      if (m != "qwen3_5" && m != "qwen3_5_text") {
        fail(path, "model_type \"" + m + "\" is not supported (qwen3_5 / qwen3_5_text)");
      }
    }
  }
  if (const json* act = find(tc, "hidden_act"); act && *act != "silu") {
    fail(path, "hidden_act " + act->dump() + " is not implemented (only \"silu\")");
  }
  if (const json* ab = find(tc, "attention_bias"); ab && *ab != false) {
    fail(path, "attention_bias " + ab->dump() + " is not implemented (only false)");
  }
  if (const json* ne = find(tc, "num_experts"); ne && *ne != 0) {
    fail(path, "mixture-of-experts configs (num_experts " + ne->dump() + ") are not implemented");
  }

  BackboneConfig out;
  TextConfig& t = out.text;
  t.hidden_size = get_int(tc, "hidden_size", path, 1);
  t.num_hidden_layers = get_int(tc, "num_hidden_layers", path, 1);
  if (t.num_hidden_layers > kMaxLayers)
    fail(path, "num_hidden_layers above " + std::to_string(kMaxLayers));
  t.intermediate_size = get_int(tc, "intermediate_size", path, 1);
  t.num_attention_heads = get_int(tc, "num_attention_heads", path, 1);
  t.num_key_value_heads = get_int(tc, "num_key_value_heads", path, 1);
  t.head_dim = get_int(tc, "head_dim", path, 1);
  t.linear_num_key_heads = get_int(tc, "linear_num_key_heads", path, 1);
  t.linear_num_value_heads = get_int(tc, "linear_num_value_heads", path, 1);
  t.linear_key_head_dim = get_int(tc, "linear_key_head_dim", path, 1);
  t.linear_value_head_dim = get_int(tc, "linear_value_head_dim", path, 1);
  t.linear_conv_kernel_dim = get_int(tc, "linear_conv_kernel_dim", path, 1, 4);
  t.vocab_size = get_int(tc, "vocab_size", path, 1);
  if (find(tc, "rms_norm_eps")) {
    t.rms_norm_eps = get_number(tc, "rms_norm_eps", path);
    if (t.rms_norm_eps <= 0) fail(path, "\"rms_norm_eps\" must be positive");
  }
  if (t.num_attention_heads % t.num_key_value_heads != 0) {
    fail(path, "num_attention_heads " + std::to_string(t.num_attention_heads) +
                   " is not a multiple of num_key_value_heads " +
                   std::to_string(t.num_key_value_heads));
  }
  if (t.linear_num_value_heads % t.linear_num_key_heads != 0) {
    fail(path, "linear_num_value_heads " + std::to_string(t.linear_num_value_heads) +
                   " is not a multiple of linear_num_key_heads " +
                   std::to_string(t.linear_num_key_heads));
  }
  parse_rope(tc, t, path);

  if (const json* lt = find(tc, "layer_types")) {
    if (!lt->is_array() || lt->size() != static_cast<size_t>(t.num_hidden_layers)) {
      fail(path, "\"layer_types\" must list num_hidden_layers (" +
                     std::to_string(t.num_hidden_layers) + ") entries");
    }
    for (const json& s : *lt) {
      if (s == "linear_attention") {
        t.layer_types.push_back(LayerType::LinearAttention);
      } else if (s == "full_attention") {
        t.layer_types.push_back(LayerType::FullAttention);
      } else {
        fail(path, "layer type " + s.dump() + " is not implemented");
      }
    }
  } else {
    int interval = get_int(tc, "full_attention_interval", path, 1, 4);
    for (int i = 0; i < t.num_hidden_layers; ++i) {
      t.layer_types.push_back((i + 1) % interval == 0 ? LayerType::FullAttention
                                                      : LayerType::LinearAttention);
    }
  }

  // The conditional-generation wrapper's flag wins over the text config's (HF reads the top level).
  const json* tie = find(root, "tie_word_embeddings");
  if (!tie) tie = find(tc, "tie_word_embeddings");
  if (tie) {
    if (!tie->is_boolean()) fail(path, "\"tie_word_embeddings\" must be a boolean");
    out.tie_word_embeddings = tie->get<bool>();
  }
  // HF writes it at the top level; a flat text config has only that level.
  if (const json* q = find(root, "quantization_config")) {
    out.quantization = parse_quantization(*q, path);
  } else if (nested) {
    if (const json* qt = find(*nested, "quantization_config"))
      out.quantization = parse_quantization(*qt, path);
  }
  if (const json* vc = find(root, "vision_config")) {
    out.vision = parse_vision(*vc, path);
  }
  return out;
}

HeadConfig parse_head_config(std::string_view head_config_json, const std::string& path) {
  json j = parse_object(head_config_json, path);
  for (const auto& [k, v] : j.items()) {
    static const char* kKnown[] = {"hidden_size", "width",       "routing_layers", "layers",
                                   "heads",       "feedforward", "dropout"};
    bool known = false;
    for (const char* kk : kKnown) known = known || k == kk;
    if (!known)
      fail(path, "unknown key \"" + k + "\" (refusing a head this engine may not implement)");
  }
  HeadConfig h;
  h.hidden_size = get_int(j, "hidden_size", path, 1);
  h.width = get_int(j, "width", path, 1);
  h.routing_layers = get_int(j, "routing_layers", path, 0);
  h.layers = get_int(j, "layers", path, 0);
  if (h.routing_layers > kMaxLayers || h.layers > kMaxLayers) {
    fail(path, "more than " + std::to_string(kMaxLayers) + " layers");
  }
  h.heads = get_int(j, "heads", path, 1);
  h.feedforward = get_int(j, "feedforward", path, 1);
  if (h.width % h.heads != 0) {
    fail(path, "width " + std::to_string(h.width) + " is not a multiple of heads " +
                   std::to_string(h.heads));
  }
  return h;
}

}  // namespace clef::model

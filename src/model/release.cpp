// Release::load: verify (optional) -> configs -> backbone shards -> joint head -> tokenizer,
// checking every tensor against the shapes the config implies.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "model/config.h"
#include "model/pinning.h"
#include "model/release.h"
#include "model/safetensors.h"
#include "model/tensor_specs.h"

namespace clef::model {

namespace fs = std::filesystem;

Release::Release() = default;
Release::~Release() = default;

const Tensor& Release::backbone(const std::string& tensor_name) const {
  auto it = backbone_.find(tensor_name);
  if (it == backbone_.end()) throw LoadError(dir + ": no backbone tensor '" + tensor_name + "'");
  return it->second;
}

const Tensor& Release::visual(const std::string& tensor_name) const {
  auto it = visual_.find(tensor_name);
  if (it == visual_.end())
    throw LoadError(dir + ": no vision tower tensor 'model.visual." + tensor_name + "'");
  return it->second;
}

const Tensor& Release::head_tensor(const std::string& tensor_name) const {
  auto it = head_.find(tensor_name);
  if (it == head_.end()) throw LoadError(dir + ": no joint head tensor '" + tensor_name + "'");
  return it->second;
}

namespace {

bool is_float(DType d) {
  return d == DType::BF16 || d == DType::F16 || d == DType::F32 || d == DType::F64;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Checks `found` (canonical name -> tensor) against `expected`: same names, same shapes, float
// dtypes (F8_E4M3 is checked by attach_fp8_scales, which runs first).
void check_tensors(const std::map<std::string, Tensor>& found,
                   const std::vector<TensorSpec>& expected, const std::string& where,
                   bool allow_fp8 = false) {
  std::set<std::string> want;
  for (const TensorSpec& s : expected) {
    want.insert(s.name);
    auto it = found.find(s.name);
    if (it == found.end()) throw LoadError(where + ": missing tensor '" + s.name + "'");
    const Tensor& t = it->second;
    if (!is_float(t.dtype) && !(allow_fp8 && t.dtype == DType::F8_E4M3)) {
      throw LoadError(t.file + ": tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) +
                      ", expected a float type");
    }
    if (t.shape != s.shape) {
      throw LoadError(t.file + ": tensor '" + t.name + "' has shape " + shape_str(t.shape) +
                      ", the config implies " + shape_str(s.shape));
    }
  }
  for (const auto& [name, t] : found) {
    if (!want.count(name)) {
      throw LoadError(t.file + ": unexpected tensor '" + name + "' (not implied by the config)");
    }
  }
}

constexpr const char* kVisualPrefix = "model.visual.";

// Backbone names in the file -> canonical names; "" = skipped (multi-token prediction) or the
// vision tower's (loaded separately).
std::string canonical_backbone_name(const std::string& n, const std::string& file) {
  static const std::string kLm = "model.language_model.", kModel = "model.";
  if (n.rfind(kVisualPrefix, 0) == 0 || n.rfind("mtp.", 0) == 0) return "";
  if (n == "lm_head.weight") return n;
  if (n.rfind(kLm, 0) == 0) return n.substr(kLm.size());
  if (n.rfind(kModel, 0) == 0) return n.substr(kModel.size());
  throw LoadError(file + ": unexpected tensor '" + n +
                  "' (not a model./model.language_model. name)");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const std::string kScaleSuffix = "_scale_inv";  // "<weight name>_scale_inv" (HF fine-grained FP8)

// The backbone weights an FP8 release may store in F8_E4M3: the layers' linear projections (the
// embeddings, lm_head, norms, conv taps and GDN gates stay in a float type, as in Qwen's releases).
bool may_be_fp8(const std::string& canonical) {
  if (canonical.rfind("layers.", 0) != 0 || !ends_with(canonical, ".weight")) return false;
  const std::string module = canonical.substr(0, canonical.size() - 7);
  const std::string leaf = module.substr(module.rfind('.') + 1);
  return ends_with(leaf, "_proj") || leaf.rfind("in_proj_", 0) == 0;
}

// Attaches every `<weight>_scale_inv` to its F8_E4M3 weight, checking the pairing, the dtypes, the
// scale grid's shape and modules_to_not_convert. `file_names`: canonical -> name in the file (the
// full HF module name, which modules_to_not_convert matches as a substring, as transformers does).
void attach_fp8_scales(std::map<std::string, Tensor>& tensors,
                       std::map<std::string, Tensor>& scales,
                       const std::map<std::string, std::string>& file_names,
                       const QuantizationConfig& q, const std::string& config_path) {
  for (auto& [name, t] : tensors) {
    if (t.dtype != DType::F8_E4M3) continue;
    const std::string& full = file_names.at(name);
    if (!q.fp8) {
      throw LoadError(t.file + ": tensor '" + full + "' is F8_E4M3 but " + config_path +
                      " has no fp8 quantization_config");
    }
    if (!may_be_fp8(name) || t.shape.size() != 2) {
      throw LoadError(t.file + ": tensor '" + full +
                      "' is F8_E4M3; only the layers' 2-D projection weights (*_proj, in_proj_*) "
                      "may be FP8");
    }
    const std::string module = full.substr(0, full.size() - std::string(".weight").size());
    for (const std::string& m : q.modules_to_not_convert) {
      if (module.find(m) != std::string::npos) {
        throw LoadError(t.file + ": tensor '" + full + "' is F8_E4M3 but its module matches \"" +
                        m + "\" in quantization_config.modules_to_not_convert");
      }
    }
    auto it = scales.find(name + kScaleSuffix);
    if (it == scales.end()) {
      throw LoadError(t.file + ": tensor '" + full + "' is F8_E4M3 but has no '" + full +
                      kScaleSuffix + "'");
    }
    const Tensor& s = it->second;
    if (s.dtype != DType::F32 && s.dtype != DType::BF16) {
      throw LoadError(s.file + ": tensor '" + file_names.at(s.name) + "' has dtype " +
                      dtype_name(s.dtype) + "; FP8 block scales must be F32 or BF16");
    }
    const int64_t b = q.block;
    const std::vector<int64_t> grid = {(t.shape[0] + b - 1) / b, (t.shape[1] + b - 1) / b};
    if (s.shape != grid) {
      throw LoadError(s.file + ": tensor '" + file_names.at(s.name) + "' has shape " +
                      shape_str(s.shape) + "; " + std::to_string(b) + "x" + std::to_string(b) +
                      " blocks of " + shape_str(t.shape) + " need " + shape_str(grid));
    }
    auto bs = std::make_shared<BlockScales>();
    bs->name = file_names.at(s.name);
    bs->dtype = s.dtype;
    bs->data = s.data;
    bs->rows = grid[0];
    bs->cols = grid[1];
    bs->block = q.block;
    t.scales = std::move(bs);
    scales.erase(it);
  }
  if (!scales.empty()) {
    const Tensor& s = scales.begin()->second;
    throw LoadError(s.file + ": tensor '" + file_names.at(s.name) +
                    "' scales a weight that is missing or not F8_E4M3");
  }
}

}  // namespace

struct ReleaseLoader {
  static std::shared_ptr<const Release> load(const std::string& dir, const LoadOptions& opts) {
    auto progress = [&](const std::string& s) {
      if (opts.progress) opts.progress(s);
    };
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      throw LoadError(dir + ": not a model folder (no such directory)");
    auto r = std::make_shared<Release>();
    r->dir = dir;
    r->name = model_name_from_path(dir);
    r->revision = !opts.revision.empty() ? opts.revision : revision_from_path(dir);
    if (r->revision.empty()) r->revision = "unknown";
    auto file = [&](const std::string& f) { return (fs::path(dir) / f).string(); };

    if (!opts.verify_file.empty()) {
      progress("verifying sha256 of the release files against " + opts.verify_file);
      size_t n = verify_release(dir, opts.verify_file);
      r->weights_sha256_verified = true;
      progress("verified " + std::to_string(n) + " files");
    }

    const std::string config_path = file("config.json");
    BackboneConfig bc = parse_backbone_config(read_text_file(config_path), config_path);
    r->text = bc.text;
    r->quantization = bc.quantization;
    const std::string head_config_path = file("joint_head_config.json");
    r->head = parse_head_config(read_text_file(head_config_path), head_config_path);
    if (r->head.hidden_size != r->text.hidden_size) {
      throw LoadError(head_config_path + ": hidden_size " + std::to_string(r->head.hidden_size) +
                      " differs from the backbone's " + std::to_string(r->text.hidden_size));
    }

    // Backbone: one file, or shards listed by the index.
    std::vector<std::string> shards;
    std::map<std::string, std::string> weight_map;  // file name -> shard (when indexed)
    const std::string index_path = file("model.safetensors.index.json");
    if (fs::exists(index_path, ec)) {
      nlohmann::json idx = nlohmann::json::parse(read_text_file(index_path), nullptr, false);
      if (idx.is_discarded() || !idx.is_object() || !idx.contains("weight_map") ||
          !idx["weight_map"].is_object()) {
        throw LoadError(index_path + ": not a safetensors index (no \"weight_map\" object)");
      }
      std::set<std::string> unique;
      for (const auto& [name, shard] : idx["weight_map"].items()) {
        if (!shard.is_string())
          throw LoadError(index_path + ": weight_map['" + name + "'] is not a string");
        std::string s = shard.get<std::string>();
        if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..") {
          throw LoadError(index_path + ": weight_map['" + name + "'] names \"" + s +
                          "\", not a file in the model folder");
        }
        weight_map[name] = s;
        unique.insert(s);
      }
      shards.assign(unique.begin(), unique.end());
      for (const std::string& s : shards) {
        if (!fs::exists(file(s), ec)) {
          throw LoadError(index_path + ": shard " + file(s) + " is missing");
        }
      }
    } else if (fs::exists(file("model.safetensors"), ec)) {
      shards.push_back("model.safetensors");
    } else {
      throw LoadError(dir + ": no model.safetensors or model.safetensors.index.json");
    }

    std::vector<TensorSpec> expected = backbone_tensor_specs(r->text, !bc.tie_word_embeddings);
    std::map<std::string, Tensor> fp8_scales;      // canonical "<weight>_scale_inv" -> tensor
    std::map<std::string, std::string> file_name;  // canonical -> name in the file
    for (const std::string& s : shards) {
      progress("mapping " + file(s));
      auto st = SafetensorsFile::open(file(s));
      r->mappings_.push_back(std::const_pointer_cast<SafetensorsFile>(st));
      for (const Tensor& t : st->tensors()) {
        auto wm = weight_map.find(t.name);
        if (!weight_map.empty() && (wm == weight_map.end() || wm->second != s)) {
          throw LoadError(st->path() + ": tensor '" + t.name + "' is not mapped to this shard by " +
                          index_path);
        }
        if (t.name.rfind(kVisualPrefix, 0) == 0) {
          Tensor c = t;
          c.name = t.name.substr(std::string(kVisualPrefix).size());
          c.round_to_bf16 = opts.round_to_bf16;
          if (!r->visual_.emplace(c.name, std::move(c)).second) {
            throw LoadError(st->path() + ": tensor '" + t.name + "' appears twice");
          }
          continue;
        }
        std::string canon = canonical_backbone_name(t.name, st->path());
        if (canon.empty()) continue;
        if (bc.tie_word_embeddings && canon == "lm_head.weight") continue;  // HF ties it
        Tensor c = t;
        c.name = canon;
        c.round_to_bf16 = opts.round_to_bf16;
        file_name[canon] = t.name;
        auto& dst = ends_with(canon, ".weight" + kScaleSuffix) ? fp8_scales : r->backbone_;
        if (!dst.emplace(canon, std::move(c)).second) {
          throw LoadError(st->path() + ": tensor '" + t.name + "' duplicates canonical '" + canon +
                          "'");
        }
      }
    }
    for (const auto& [name, shard] : weight_map) {
      bool present = false;
      for (const auto& m : r->mappings_) {
        present = present || static_cast<const SafetensorsFile*>(m.get())->find(name);
      }
      if (!present)
        throw LoadError(file(shard) + ": tensor '" + name + "' listed in the index is missing");
    }
    attach_fp8_scales(r->backbone_, fp8_scales, file_name, r->quantization, config_path);
    check_tensors(r->backbone_, expected, dir + " (backbone safetensors)", true);
    if (bc.tie_word_embeddings) {
      Tensor lm = r->backbone_.at("embed_tokens.weight");
      lm.name = "lm_head.weight";
      r->backbone_.emplace(lm.name, std::move(lm));
    }
    progress("backbone: " + std::to_string(r->backbone_.size()) + " tensors, " +
             std::to_string(r->text.num_hidden_layers) + " layers");

    // The vision tower: weights without one, or a config without a `vision_config` (a text-only
    // config, e.g. a flat one; HF ignores the weights then too), make a text model. A partial or
    // misshapen tower is refused.
    if (!bc.vision) r->visual_.clear();
    if (!r->visual_.empty()) {
      if (r->text.mrope_section.empty()) {
        throw LoadError(config_path +
                        ": a release with a vision tower needs the text config's "
                        "\"mrope_section\" (multimodal rotary positions)");
      }
      if (bc.vision->out_hidden_size != r->text.hidden_size) {
        throw LoadError(config_path + ": vision_config out_hidden_size " +
                        std::to_string(bc.vision->out_hidden_size) +
                        " differs from the text hidden_size " +
                        std::to_string(r->text.hidden_size));
      }
      check_tensors(r->visual_, vision_tensor_specs(*bc.vision),
                    dir + " (vision tower, model.visual.*)");
      r->vision = bc.vision;
      progress("vision tower: " + std::to_string(r->visual_.size()) + " tensors, " +
               std::to_string(bc.vision->depth) + " blocks");
    }

    const std::string head_path = file("joint_head.safetensors");
    auto hf = SafetensorsFile::open(head_path);
    r->mappings_.push_back(std::const_pointer_cast<SafetensorsFile>(hf));
    for (const Tensor& t : hf->tensors()) {
      Tensor c = t;
      c.round_to_bf16 = opts.round_to_bf16;
      r->head_.emplace(c.name, std::move(c));
    }
    check_tensors(r->head_, head_tensor_specs(r->head), head_path);
    progress("joint head: " + std::to_string(r->head_.size()) + " tensors");

    const std::string tok_path = file("tokenizer.json");
    try {
      r->tokenizer =
          std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::load(tok_path));
    } catch (const tokenizer::TokenizerError& e) {
      throw LoadError(tok_path + ": " + e.what());
    }
    if (r->tokenizer->vocab_size() > static_cast<size_t>(r->text.vocab_size)) {
      throw LoadError(tok_path + ": token ids up to " +
                      std::to_string(r->tokenizer->vocab_size() - 1) +
                      " exceed the model's vocab_size " + std::to_string(r->text.vocab_size));
    }
    return r;
  }
};

std::shared_ptr<const Release> Release::load(const std::string& dir, const LoadOptions& opts) {
  return ReleaseLoader::load(dir, opts);
}

}  // namespace clef::model

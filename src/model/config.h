// config.json / joint_head_config.json parsing (docs/spec/model.md §2, §4): accepts a nested
// `text_config` or a flat text config, `layer_types` or `full_attention_interval`, rope in
// `rope_parameters` or the older flat keys; refuses (LoadError naming the file and key) anything
// the engines do not implement.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "model/release.h"

namespace clef::model {

struct BackboneConfig {
  TextConfig text;
  bool tie_word_embeddings = false;    // lm_head.weight is embed_tokens.weight
  QuantizationConfig quantization;     // `quantization_config` (HF fine-grained FP8 only)
  std::optional<VisionConfig> vision;  // from `vision_config` when present
};

BackboneConfig parse_backbone_config(std::string_view config_json, const std::string& path);
HeadConfig parse_head_config(std::string_view head_config_json, const std::string& path);

// Reads a whole file; throws LoadError naming it when missing or unreadable.
std::string read_text_file(const std::string& path);

}  // namespace clef::model

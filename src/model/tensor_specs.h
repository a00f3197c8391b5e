// The tensors a config implies (docs/spec/model.md §2, §4): canonical names and shapes. The loader
// checks files against these lists and make-model writes exactly these.
#pragma once

#include <vector>

#include "model/release.h"
#include "model/safetensors.h"

namespace clef::model {

// Canonical backbone names ("embed_tokens.weight", "layers.0.linear_attn.A_log", ...,
// "lm_head.weight").
std::vector<TensorSpec> backbone_tensor_specs(const TextConfig& t, bool with_lm_head = true);
// joint_head.safetensors names: 22 + 14·routing_layers + 18·layers tensors.
std::vector<TensorSpec> head_tensor_specs(const HeadConfig& h);

}  // namespace clef::model

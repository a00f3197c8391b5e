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
// Vision tower names without "model.visual." (docs/spec/media.md §7): patch_embed, pos_embed,
// blocks.{i}.{norm1,norm2,attn.qkv,attn.proj,mlp.linear_fc1,mlp.linear_fc2}, merger.
std::vector<TensorSpec> vision_tensor_specs(const VisionConfig& v);
// joint_head.safetensors names: 22 + 14·routing_layers + 18·layers tensors.
std::vector<TensorSpec> head_tensor_specs(const HeadConfig& h);

}  // namespace clef::model

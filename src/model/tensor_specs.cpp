#include "model/tensor_specs.h"

#include <string>

namespace clef::model {

std::vector<TensorSpec> backbone_tensor_specs(const TextConfig& t, bool with_lm_head) {
  const int64_t H = t.hidden_size, I = t.intermediate_size, V = t.vocab_size;
  const int64_t Hk = t.linear_num_key_heads, Hv = t.linear_num_value_heads;
  const int64_t dk = t.linear_key_head_dim, dv = t.linear_value_head_dim;
  const int64_t nh = t.num_attention_heads, nkv = t.num_key_value_heads, hd = t.head_dim;
  const int64_t conv = 2 * Hk * dk + Hv * dv;
  std::vector<TensorSpec> s;
  auto add = [&s](std::string name, std::vector<int64_t> shape) {
    s.push_back({std::move(name), DType::BF16, std::move(shape)});
  };
  add("embed_tokens.weight", {V, H});
  for (size_t i = 0; i < t.layer_types.size(); ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {H});
    add(p + "post_attention_layernorm.weight", {H});
    add(p + "mlp.gate_proj.weight", {I, H});
    add(p + "mlp.up_proj.weight", {I, H});
    add(p + "mlp.down_proj.weight", {H, I});
    if (t.layer_types[i] == LayerType::LinearAttention) {
      const std::string a = p + "linear_attn.";
      add(a + "in_proj_qkv.weight", {conv, H});
      add(a + "in_proj_z.weight", {Hv * dv, H});
      add(a + "in_proj_b.weight", {Hv, H});
      add(a + "in_proj_a.weight", {Hv, H});
      add(a + "conv1d.weight", {conv, 1, t.linear_conv_kernel_dim});
      add(a + "dt_bias", {Hv});
      add(a + "A_log", {Hv});
      add(a + "norm.weight", {dv});
      add(a + "out_proj.weight", {H, Hv * dv});
    } else {
      const std::string a = p + "self_attn.";
      add(a + "q_proj.weight", {nh * 2 * hd, H});
      add(a + "k_proj.weight", {nkv * hd, H});
      add(a + "v_proj.weight", {nkv * hd, H});
      add(a + "q_norm.weight", {hd});
      add(a + "k_norm.weight", {hd});
      add(a + "o_proj.weight", {H, nh * hd});
    }
  }
  add("norm.weight", {H});
  if (with_lm_head) add("lm_head.weight", {V, H});
  return s;
}

std::vector<TensorSpec> vision_tensor_specs(const VisionConfig& v) {
  const int64_t W = v.hidden_size, I = v.intermediate_size, M = v.merged_width();
  std::vector<TensorSpec> s;
  auto add = [&s](std::string name, std::vector<int64_t> shape) {
    s.push_back({std::move(name), DType::BF16, std::move(shape)});
  };
  auto linear = [&](const std::string& p, int64_t out, int64_t in) {
    add(p + ".weight", {out, in});
    add(p + ".bias", {out});
  };
  auto layer_norm = [&](const std::string& p, int64_t n) {
    add(p + ".weight", {n});
    add(p + ".bias", {n});
  };
  add("patch_embed.proj.weight",
      {W, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size});
  add("patch_embed.proj.bias", {W});
  add("pos_embed.weight", {v.num_position_embeddings, W});
  for (int i = 0; i < v.depth; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    layer_norm(p + "norm1", W);
    layer_norm(p + "norm2", W);
    linear(p + "attn.qkv", 3 * W, W);
    linear(p + "attn.proj", W, W);
    linear(p + "mlp.linear_fc1", I, W);
    linear(p + "mlp.linear_fc2", W, I);
  }
  layer_norm("merger.norm", W);
  linear("merger.linear_fc1", M, M);
  linear("merger.linear_fc2", v.out_hidden_size, M);
  return s;
}

std::vector<TensorSpec> head_tensor_specs(const HeadConfig& h) {
  const int64_t D = h.hidden_size, W = h.width, F = h.feedforward;
  std::vector<TensorSpec> s;
  auto add = [&s](std::string name, std::vector<int64_t> shape) {
    s.push_back({std::move(name), DType::BF16, std::move(shape)});
  };
  auto layer_norm = [&](const std::string& p, int64_t n) {
    add(p + ".weight", {n});
    add(p + ".bias", {n});
  };
  auto linear = [&](const std::string& p, int64_t out, int64_t in) {
    add(p + ".weight", {out, in});
    add(p + ".bias", {out});
  };
  auto mha = [&](const std::string& p) {
    add(p + ".in_proj_weight", {3 * W, W});
    add(p + ".in_proj_bias", {3 * W});
    linear(p + ".out_proj", W, W);
  };
  layer_norm("hidden_norm", D);
  for (const char* proj :
       {"memory", "question", "option_question", "global", "option_context", "option_lexical"}) {
    add(std::string(proj) + "_projection.weight", {W, D});
  }
  add("type_embedding.weight", {3, W});
  for (int i = 0; i < h.routing_layers; ++i) {
    const std::string p = "evidence_layers." + std::to_string(i) + ".";
    layer_norm(p + "query_norm", W);
    layer_norm(p + "memory_norm", W);
    layer_norm(p + "feedforward_norm", W);
    mha(p + "attention");
    linear(p + "feedforward.0", F, W);
    linear(p + "feedforward.3", W, F);
  }
  layer_norm("option_summary_norm", W);
  for (int i = 0; i < h.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    mha(p + "self_attn");
    mha(p + "multihead_attn");
    linear(p + "linear1", F, W);
    linear(p + "linear2", W, F);
    layer_norm(p + "norm1", W);
    layer_norm(p + "norm2", W);
    layer_norm(p + "norm3", W);
  }
  layer_norm("field_norm", W);
  layer_norm("option_norm", W);
  linear("residual_scorer.0", W, 4 * W);
  linear("residual_scorer.3", 1, W);
  add("prior_logit_scale", {});
  add("joint_logit_scale", {});
  add("residual_gate", {});
  return s;
}

}  // namespace clef::model

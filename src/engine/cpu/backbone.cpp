#include "engine/cpu/backbone.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/cpu/gated_attention.h"
#include "engine/cpu/gated_deltanet.h"
#include "engine/cpu/linear.h"
#include "engine/cpu/ops.h"

namespace clef::engine::cpu {

namespace {

// Token rows per MLP pass: bounds the [rows, intermediate] activations for long inputs.
constexpr int kMlpRows = 2048;

void add_into(std::vector<float>& h, const std::vector<float>& delta) {
  for (size_t i = 0; i < h.size(); ++i) h[i] += delta[i];
}

void mlp_residual(const model::Release& release, int layer, std::vector<float>& h, int T,
                  GemmInputs inputs) {
  const auto& c = release.text;
  const int H = c.hidden_size, I = c.intermediate_size;
  const std::string p = "layers." + std::to_string(layer) + ".";
  const std::vector<float> w_post = to_f32(release.backbone(p + "post_attention_layernorm.weight"));
  const model::Tensor& gate_w = release.backbone(p + "mlp.gate_proj.weight");
  const model::Tensor& up_w = release.backbone(p + "mlp.up_proj.weight");
  const model::Tensor& down_w = release.backbone(p + "mlp.down_proj.weight");
  const int rows_max = std::min(T, kMlpRows);
  std::vector<float> u(static_cast<size_t>(rows_max) * H), gate(static_cast<size_t>(rows_max) * I),
      up(gate.size()), down(u.size());
  for (int r0 = 0; r0 < T; r0 += kMlpRows) {
    const int n = std::min(kMlpRows, T - r0);
    float* hr = h.data() + static_cast<size_t>(r0) * H;
    rms_norm_1p(hr, w_post.data(), static_cast<float>(c.rms_norm_eps), n, H, u.data());
    linear(gate_w, u.data(), n, H, gate.data(), I, nullptr, 0, -1, inputs);
    linear(up_w, u.data(), n, H, up.data(), I, nullptr, 0, -1, inputs);
    for (size_t i = 0; i < static_cast<size_t>(n) * I; ++i) gate[i] = siluf(gate[i]) * up[i];
    linear(down_w, gate.data(), n, I, down.data(), H, nullptr, 0, -1, inputs);
    for (size_t i = 0; i < static_cast<size_t>(n) * H; ++i) hr[i] += down[i];
  }
}

}  // namespace

std::vector<float> run_backbone(const model::Release& release, const std::vector<int32_t>& ids,
                                int threads, std::vector<std::vector<float>>* hidden_states,
                                const MediaInputs* media, GemmInputs inputs) {
  const auto& c = release.text;
  const int T = static_cast<int>(ids.size());
  const int H = c.hidden_size, L = c.num_hidden_layers;
  if (T == 0) throw std::runtime_error("backbone: empty input");
  if (static_cast<int>(c.layer_types.size()) != L)
    throw std::runtime_error("backbone: layer_types has " + std::to_string(c.layer_types.size()) +
                             " entries for " + std::to_string(L) + " layers");
  const float eps = static_cast<float>(c.rms_norm_eps);

  const model::Tensor& embed = release.backbone("embed_tokens.weight");
  const int64_t vocab = embed.shape.empty() ? 0 : embed.shape[0];
  std::vector<float> h(static_cast<size_t>(T) * H);
  for (int t = 0; t < T; ++t) {
    if (ids[t] < 0 || ids[t] >= vocab)
      throw std::runtime_error("token id " + std::to_string(ids[t]) +
                               " is outside the model vocabulary (" + std::to_string(vocab) + ")");
    embed.to_float(h.data() + static_cast<size_t>(t) * H, static_cast<size_t>(ids[t]) * H, H);
  }
  if (media) {
    // The tower's rows replace the pads' embeddings: image pads take the image rows in order,
    // video pads the video rows.
    if (!media->token_types || !media->position_ids ||
        (!media->visual_rows && media->image_rows + media->video_rows > 0))
      throw std::runtime_error("backbone: media inputs without token types, positions or rows");
    int64_t next[3] = {0, 0, media->image_rows};
    const int64_t end[3] = {0, media->image_rows, media->image_rows + media->video_rows};
    for (int t = 0; t < T; ++t) {
      const int type = media->token_types[t];
      if (type == 0) continue;
      if (type > 2 || next[type] >= end[type])
        throw std::runtime_error("backbone: more " +
                                 std::string(type == 1   ? "image"
                                             : type == 2 ? "video"
                                                         : "unknown") +
                                 " pad tokens than vision rows");
      std::copy_n(media->visual_rows + static_cast<size_t>(next[type]++) * H, H,
                  h.data() + static_cast<size_t>(t) * H);
    }
    if (next[1] != end[1] || next[2] != end[2])
      throw std::runtime_error("backbone: " + std::to_string(next[1]) + " image and " +
                               std::to_string(next[2] - end[1]) + " video pad tokens for " +
                               std::to_string(media->image_rows) + " image and " +
                               std::to_string(media->video_rows) + " video rows");
  }
  if (hidden_states) {
    hidden_states->clear();
    hidden_states->push_back(h);
  }

  std::vector<float> u(h.size());
  for (int layer = 0; layer < L; ++layer) {
    const std::string p = "layers." + std::to_string(layer) + ".";
    const std::vector<float> w_in = to_f32(release.backbone(p + "input_layernorm.weight"));
    rms_norm_1p(h.data(), w_in.data(), eps, T, H, u.data());
    const std::vector<float> mixed =
        c.layer_types[layer] == model::LayerType::FullAttention
            ? gated_attention_mixer(release, layer, u.data(), T, threads,
                                    media ? media->position_ids : nullptr, inputs)
            : gated_deltanet_mixer(release, layer, u.data(), T, threads, inputs);
    add_into(h, mixed);
    mlp_residual(release, layer, h, T, inputs);
    if (hidden_states && layer + 1 < L) hidden_states->push_back(h);
  }

  const std::vector<float> w_norm = to_f32(release.backbone("norm.weight"));
  rms_norm_1p(h.data(), w_norm.data(), eps, T, H, h.data());
  if (hidden_states) hidden_states->push_back(h);
  return h;
}

}  // namespace clef::engine::cpu

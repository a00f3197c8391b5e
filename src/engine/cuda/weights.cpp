#include "engine/cuda/weights.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "engine/cuda/kernels/attn_prep.h"
#include "model/bf16.h"

namespace clef::engine::cuda {
namespace {

// Host staging for one device tensor in a given element type, filled tensor by tensor (fused
// projections append their parts).
class Staging {
 public:
  explicit Staging(DataType t) : type_(t) {
    if (t != DataType::F32 && t != DataType::BF16)
      throw std::runtime_error(std::string("cuda engine: weights in ") + data_type_name(t) +
                               " are not supported yet");
  }
  // Appends tensor t as the engine must use it (bf16-rounded per the loading rule).
  void append(const model::Tensor& t) {
    const size_t n = t.numel(), es = data_type_bytes(type_), off = bytes_.size();
    bytes_.resize(off + n * es);
    if (type_ == DataType::BF16 && t.dtype == model::DType::BF16) {
      std::memcpy(bytes_.data() + off, t.data, n * 2);
    } else {
      std::vector<float> tmp(std::min<size_t>(n, 1 << 22));
      for (size_t i = 0; i < n; i += tmp.size()) {
        const size_t m = std::min(tmp.size(), n - i);
        t.to_float(tmp.data(), i, m);
        unsigned char* dst = bytes_.data() + off + i * es;
        if (type_ == DataType::F32) {
          std::memcpy(dst, tmp.data(), m * 4);
        } else {
          for (size_t j = 0; j < m; ++j) {
            const uint16_t b = model::float_to_bf16(tmp[j]);
            std::memcpy(dst + 2 * j, &b, 2);
          }
        }
      }
    }
    elems_ += n;
  }
  size_t elems() const { return elems_; }
  DataType type() const { return type_; }
  const unsigned char* data() const { return bytes_.data(); }
  size_t bytes() const { return bytes_.size(); }

 private:
  DataType type_;
  std::vector<unsigned char> bytes_;
  size_t elems_ = 0;
};

class Uploader {
 public:
  explicit Uploader(BackboneWeights& w) : w_(w) {}
  const void* upload(const Staging& s) { return put(s.data(), s.bytes()); }
  const float* upload_f32(const std::vector<float>& v) {
    return static_cast<const float*>(put(v.data(), v.size() * sizeof(float)));
  }
  WeightRef weight(const Staging& s, int k) {
    WeightRef r;
    r.ptr = upload(s);
    r.dtype = s.type();
    r.k = k;
    r.n = static_cast<int>(s.elems() / static_cast<size_t>(k));
    return r;
  }

 private:
  const void* put(const void* src, size_t bytes) {
    DeviceBuffer b(std::max<size_t>(bytes, 1));
    CLEF_CUDA_CHECK(cudaMemcpy(b.get(), src, bytes, cudaMemcpyHostToDevice));
    w_.bytes += b.bytes();
    w_.storage.push_back(std::move(b));
    return w_.storage.back().get();
  }
  BackboneWeights& w_;
};

}  // namespace

BackboneWeights upload_backbone_weights(const model::Release& release, DataType activations,
                                        DataType gemm_weights,
                                        const std::function<void(const std::string&)>& progress) {
  const model::TextConfig& c = release.text;
  const int D = c.hidden_size, L = c.num_hidden_layers;
  BackboneWeights w;
  w.activations = activations;
  Uploader up(w);
  auto say = [&](const std::string& m) {
    if (progress) progress(m);
  };
  {
    Staging s(activations);
    s.append(release.backbone("embed_tokens.weight"));
    w.embed = up.upload(s);
  }
  w.final_norm = up.upload_f32(release.backbone("norm.weight").to_float());
  const int rd = static_cast<int>(c.head_dim * c.partial_rotary_factor);
  w.rope_inv_freq = up.upload_f32(rope_inv_freq(rd, c.rope_theta));
  w.max_in_proj = 2 * c.intermediate_size;
  w.layers.resize(L);
  for (int i = 0; i < L; ++i) {
    LayerWeights& ly = w.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    auto t = [&](const std::string& n) -> const model::Tensor& { return release.backbone(p + n); };
    auto fused = [&](std::initializer_list<const char*> names, int k) {
      Staging s(gemm_weights);
      for (const char* n : names) s.append(t(n));
      return up.weight(s, k);
    };
    ly.linear = c.layer_types[i] == model::LayerType::LinearAttention;
    ly.input_norm = up.upload_f32(t("input_layernorm.weight").to_float());
    ly.post_norm = up.upload_f32(t("post_attention_layernorm.weight").to_float());
    if (ly.linear) {
      ly.in_proj = fused({"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight",
                          "linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight"},
                         D);
      Staging conv(activations);
      conv.append(t("linear_attn.conv1d.weight"));
      ly.gdn.conv_w = up.upload(conv);
      ly.gdn.A_log = up.upload_f32(t("linear_attn.A_log").to_float());
      ly.gdn.dt_bias = up.upload_f32(t("linear_attn.dt_bias").to_float());
      ly.gdn.norm_w = up.upload_f32(t("linear_attn.norm.weight").to_float());
      ly.out_proj = fused({"linear_attn.out_proj.weight"},
                          c.linear_num_value_heads * c.linear_value_head_dim);
    } else {
      ly.in_proj = fused(
          {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}, D);
      ly.attention.q_norm = up.upload_f32(t("self_attn.q_norm.weight").to_float());
      ly.attention.k_norm = up.upload_f32(t("self_attn.k_norm.weight").to_float());
      ly.out_proj = fused({"self_attn.o_proj.weight"}, c.num_attention_heads * c.head_dim);
    }
    ly.gate_up = fused({"mlp.gate_proj.weight", "mlp.up_proj.weight"}, D);
    ly.down = fused({"mlp.down_proj.weight"}, c.intermediate_size);
    w.max_in_proj = std::max(w.max_in_proj, ly.in_proj.n);
    if ((i + 1) % 8 == 0 || i + 1 == L)
      say("uploaded layer " + std::to_string(i + 1) + "/" + std::to_string(L));
  }
  return w;
}

}  // namespace clef::engine::cuda

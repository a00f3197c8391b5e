#include "engine/cuda/weights.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>

#include "engine/cuda/gemm/swiglu_gemm.h"
#include "engine/cuda/kernels/attn_prep.h"
#include "engine/cuda/kernels/quantize.h"
#include "engine/cuda/staging.h"

namespace clef::engine::cuda {
namespace {

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
  // FP8 weight [n, k] from its stacked parts. An FP8 release's codes and scales are used as
  // stored when every part but the last fills whole 128-row blocks (the blocks then never mix
  // two parts); otherwise, and for a bf16 release, the bf16 values are quantised on the device.
  WeightRef fp8_weight(const std::vector<const model::Tensor*>& parts, int k, bool& as_stored) {
    size_t n = 0;
    as_stored = true;
    for (size_t i = 0; i < parts.size(); ++i) {
      const model::Tensor& t = *parts[i];
      n += t.numel() / static_cast<size_t>(k);
      if (t.dtype != model::DType::F8_E4M3 || !t.scales || t.scales->block != 128 ||
          (i + 1 < parts.size() && (t.numel() / k) % 128 != 0))
        as_stored = false;
    }
    const int ld = fp8_weight_scale_ld(k);
    const size_t block_rows = (n + 127) / 128;
    WeightRef r;
    r.dtype = DataType::F8_E4M3;
    r.n = static_cast<int>(n);
    r.k = k;
    r.scale_mode = ScaleMode::Block128x128;
    DeviceBuffer codes(std::max<size_t>(n * k, 1));
    DeviceBuffer scales(block_rows * ld * sizeof(float));
    if (as_stored) {
      std::vector<float> grid(block_rows * ld, 0.0f);  // padding columns are never read
      size_t row = 0, block_row = 0;
      for (const model::Tensor* t : parts) {
        const size_t rows = t->numel() / k;
        CLEF_CUDA_CHECK(
            cudaMemcpy(codes.get<uint8_t>() + row * k, t->data, rows * k, cudaMemcpyHostToDevice));
        for (int64_t br = 0; br < t->scales->rows; ++br)
          for (int64_t bc = 0; bc < t->scales->cols; ++bc)
            grid[(block_row + br) * ld + bc] = t->scales->at(br, bc);
        row += rows;
        block_row += static_cast<size_t>(t->scales->rows);
      }
      CLEF_CUDA_CHECK(
          cudaMemcpy(scales.get(), grid.data(), grid.size() * 4, cudaMemcpyHostToDevice));
    } else {
      Staging st(DataType::BF16);
      for (const model::Tensor* t : parts) st.append(*t);
      DeviceBuffer w(st.bytes());
      CLEF_CUDA_CHECK(cudaMemcpy(w.get(), st.data(), st.bytes(), cudaMemcpyHostToDevice));
      CLEF_CUDA_CHECK(cudaMemset(scales.get(), 0, scales.bytes()));
      quantize_blocks_e4m3(w.get<__nv_bfloat16>(), r.n, k, codes.get<uint8_t>(),
                           scales.get<float>(), ld, 1, nullptr);
      CLEF_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // before w is freed
    }
    r.ptr = own(std::move(codes));
    r.scale = static_cast<const float*>(own(std::move(scales)));
    return r;
  }

 private:
  const void* put(const void* src, size_t bytes) { return own(device_copy(src, bytes)); }
  const void* own(DeviceBuffer b) {
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
  w.gemm_weights = gemm_weights;
  const bool fp8 = gemm_weights == DataType::F8_E4M3;
  if (fp8 && activations != DataType::BF16)
    throw std::runtime_error("cuda engine: FP8 weights run with bf16 activations only");
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
  DeviceBuffer regroup_scratch;  // gate_up's copy while it is regrouped (freed after the upload)
  for (int i = 0; i < L; ++i) {
    LayerWeights& ly = w.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    auto t = [&](const std::string& n) -> const model::Tensor& { return release.backbone(p + n); };
    auto bf16_fused = [&](std::initializer_list<const char*> names, int k) {
      Staging s(fp8 ? DataType::BF16 : gemm_weights);
      for (const char* n : names) s.append(t(n));
      return up.weight(s, k);
    };
    // A big projection writing rows of ldc values: FP8 when asked and the FP8 GEMM takes it.
    auto fused = [&](std::initializer_list<const char*> names, int k, int ldc) {
      if (fp8 && fp8_gemm_shape_ok(k, ldc)) {
        std::vector<const model::Tensor*> parts;
        for (const char* n : names) parts.push_back(&t(n));
        bool as_stored = false;
        WeightRef r = up.fp8_weight(parts, k, as_stored);
        ++w.fp8_gemms;
        if (as_stored) ++w.fp8_from_checkpoint;
        return r;
      }
      if (fp8) ++w.bf16_gemms;
      return bf16_fused(names, k);
    };
    auto rows_of = [&](std::initializer_list<const char*> names) {
      int64_t n = 0;
      for (const char* nm : names) n += t(nm).shape.at(0);
      return static_cast<int>(n);
    };
    ly.linear = c.layer_types[i] == model::LayerType::LinearAttention;
    ly.input_norm = up.upload_f32(t("input_layernorm.weight").to_float());
    ly.post_norm = up.upload_f32(t("post_attention_layernorm.weight").to_float());
    const int Hv = c.linear_num_value_heads;
    if (ly.linear && fp8) {
      // [qkv | z] in FP8 at column 0, [b | a] in bf16 at the next multiple of 128.
      const int n8 = rows_of({"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight"});
      ly.b_col = (n8 + 127) / 128 * 128;
      ly.a_col = ly.b_col + Hv;
      ly.proj_ld = ly.b_col + (2 * Hv + 7) / 8 * 8;
      ly.in_proj =
          fused({"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight"}, D, ly.proj_ld);
      ly.in_proj_ba =
          bf16_fused({"linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight"}, D);
    } else if (ly.linear) {
      ly.in_proj = bf16_fused({"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight",
                               "linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight"},
                              D);
      ly.proj_ld = ly.in_proj.n;
      ly.a_col = ly.proj_ld - Hv;
      ly.b_col = ly.a_col - Hv;
    }
    if (ly.linear) {
      Staging conv(activations);
      conv.append(t("linear_attn.conv1d.weight"));
      ly.gdn.conv_w = up.upload(conv);
      ly.gdn.A_log = up.upload_f32(t("linear_attn.A_log").to_float());
      ly.gdn.dt_bias = up.upload_f32(t("linear_attn.dt_bias").to_float());
      ly.gdn.norm_w = up.upload_f32(t("linear_attn.norm.weight").to_float());
      ly.out_proj = fused({"linear_attn.out_proj.weight"},
                          c.linear_num_value_heads * c.linear_value_head_dim, D);
    } else {
      const std::initializer_list<const char*> qkv = {
          "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"};
      ly.in_proj = fused(qkv, D, rows_of(qkv));
      ly.proj_ld = ly.in_proj.n;
      ly.attention.q_norm = up.upload_f32(t("self_attn.q_norm.weight").to_float());
      ly.attention.k_norm = up.upload_f32(t("self_attn.k_norm.weight").to_float());
      ly.out_proj = fused({"self_attn.o_proj.weight"}, c.num_attention_heads * c.head_dim, D);
    }
    ly.gate_up = fused({"mlp.gate_proj.weight", "mlp.up_proj.weight"}, D, 2 * c.intermediate_size);
    if (!fp8 && ly.gate_up.dtype == DataType::BF16 && activations == DataType::BF16 &&
        swiglu_gemm_enabled() && swiglu_gemm_supported(c.intermediate_size, D)) {
      if (!regroup_scratch.get())
        regroup_scratch = DeviceBuffer(size_t(2) * c.intermediate_size * D * 2);
      regroup_gate_up(static_cast<__nv_bfloat16*>(const_cast<void*>(ly.gate_up.ptr)),
                      static_cast<__nv_bfloat16*>(regroup_scratch.get()), c.intermediate_size, D);
      ly.gate_up_group = kSwigluGroup;
    }
    ly.down = fused({"mlp.down_proj.weight"}, c.intermediate_size, D);
    w.max_in_proj = std::max(w.max_in_proj, ly.proj_ld);
    if ((i + 1) % 8 == 0 || i + 1 == L)
      say("uploaded layer " + std::to_string(i + 1) + "/" + std::to_string(L) +
          (fp8 ? " (FP8: " + std::to_string(w.fp8_gemms) + " projections, " +
                     std::to_string(w.fp8_from_checkpoint) + " as the release stores them, " +
                     std::to_string(w.fp8_gemms - w.fp8_from_checkpoint) + " quantised at load; " +
                     std::to_string(w.bf16_gemms) + " kept bf16)"
               : ""));
  }
  return w;
}

}  // namespace clef::engine::cuda

// The backbone's weights on the device, uploaded once and resolved into typed references: every
// GEMM weight is a WeightRef that carries its own element type (and, for FP8, its scale), so the
// layer loop never needs to know how a weight is stored. Projections that read the same input are
// fused horizontally at upload (GDN [qkv | z | b | a], attention [q/gate | k | v], MLP [gate |
// up]): one GEMM each.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/data_type.h"
#include "engine/cuda/gemm/gemm.h"
#include "model/release.h"

namespace clef::engine::cuda {

// W [n, k] row-major (a Linear's weight): y = x W^T.
struct WeightRef {
  const void* ptr = nullptr;
  DataType dtype = DataType::BF16;
  int n = 0, k = 0;
  const float* scale = nullptr;  // FP8 block scales (none yet)
  ScaleMode scale_mode = ScaleMode::None;

  GemmOperand operand() const { return {ptr, dtype, k, 0, scale, scale_mode}; }
};

struct GdnWeights {
  const void* conv_w = nullptr;  // [channels, kernel] in the activation type
  const float* A_log = nullptr;
  const float* dt_bias = nullptr;
  const float* norm_w = nullptr;  // gated RMSNorm
};

struct AttentionWeights {
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
};

struct LayerWeights {
  bool linear = true;  // GDN (linear attention) or full attention
  const float* input_norm = nullptr;
  const float* post_norm = nullptr;
  WeightRef in_proj;   // GDN [qkv | z | b | a] or attention [q/gate | k | v]
  WeightRef out_proj;  // GDN out_proj or attention o_proj
  WeightRef gate_up;   // MLP [gate | up]
  WeightRef down;
  GdnWeights gdn;
  AttentionWeights attention;
};

struct BackboneWeights {
  DataType activations = DataType::BF16;  // embeddings and the small weights the kernels read
  const void* embed = nullptr;            // [vocab, hidden]
  const float* final_norm = nullptr;
  const float* rope_inv_freq = nullptr;  // [rotary_dim / 2]
  std::vector<LayerWeights> layers;
  int max_in_proj = 0;  // widest fused input projection (columns of the proj buffer)
  size_t bytes = 0;     // device bytes held

  BackboneWeights() = default;
  BackboneWeights(BackboneWeights&&) = default;
  BackboneWeights& operator=(BackboneWeights&&) = default;
  std::vector<DeviceBuffer> storage;  // owns everything the pointers above point into
};

// Uploads the backbone of `release`: GEMM weights as `gemm_weights`, the embedding table and the
// conv taps as `activations`, norms and gates in fp32. Values are the loading rule's (bf16-rounded
// unless the release keeps fp32). Throws std::runtime_error for an unsupported type pair.
BackboneWeights upload_backbone_weights(const model::Release& release, DataType activations,
                                        DataType gemm_weights,
                                        const std::function<void(const std::string&)>& progress);

}  // namespace clef::engine::cuda

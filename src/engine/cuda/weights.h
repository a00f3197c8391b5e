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
#include "engine/cuda/kernels/quantize.h"
#include "model/release.h"

namespace clef::engine::cuda {

// W [n, k] row-major (a Linear's weight): y = x W^T.
struct WeightRef {
  const void* ptr = nullptr;
  DataType dtype = DataType::BF16;
  int n = 0, k = 0;
  // FP8 (F8_E4M3): the 128x128 block scales, rows padded to fp8_weight_scale_ld(k) (gemm.h).
  const float* scale = nullptr;
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
  // GDN [qkv | z | b | a] or attention [q/gate | k | v]. With FP8 weights a GDN layer splits it:
  // in_proj = [qkv | z] (FP8), in_proj_ba = [b | a] (bf16: small and kept unquantised), written
  // to proj at column ba_col (a multiple of 128, so that GEMM's output stays 256-byte aligned).
  WeightRef in_proj;
  WeightRef in_proj_ba;
  int proj_ld = 0;           // columns of a proj row (in_proj's output row stride)
  int b_col = 0, a_col = 0;  // GDN: the b and a columns in proj
  WeightRef out_proj;        // GDN out_proj or attention o_proj
  WeightRef gate_up;         // MLP [gate | up], or regrouped (gate_up_group > 0)
  // bf16 on sm_90: gate_up's rows in blocks of kSwigluGroup gate rows and their up rows (for the
  // SwiGLU-epilogue GEMM, gemm/swiglu_gemm.h; a cuBLASLt gate_up then feeds swiglu(..., group)).
  int gate_up_group = 0;
  WeightRef down;
  GdnWeights gdn;
  AttentionWeights attention;
};

struct BackboneWeights {
  DataType activations = DataType::BF16;   // embeddings and the small weights the kernels read
  DataType gemm_weights = DataType::BF16;  // what was asked (F8_E4M3: see upload_backbone_weights)
  int fp8_gemms = 0, bf16_gemms = 0;       // per-layer projections stored each way
  int fp8_from_checkpoint = 0;             // of the FP8 ones: codes as the release stores them
  const void* embed = nullptr;             // [vocab, hidden]
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

// Uploads the backbone of `release`: GEMM weights as `gemm_weights` (F8_E4M3: the big projections
// in FP8 -- an FP8 release's codes and scales as stored when its parts tile into 128-row blocks,
// else the bf16 values quantised at load with quantize_blocks_e4m3 -- and a GEMM whose shape the
// FP8 GEMM refuses (fp8_gemm_shape_ok) in bf16), the embedding table and the
// conv taps as `activations`, norms and gates in fp32. Values are the loading rule's (bf16-rounded
// unless the release keeps fp32). Throws std::runtime_error for an unsupported type pair.
// Whether the FP8 GEMM (gemm.h) takes a weight of depth k writing rows of ldc bf16 values, and
// its producer can quantise rows of k values (kernels/quantize.h).
inline bool fp8_gemm_shape_ok(int k, int ldc) {
  return k % 16 == 0 && ldc % 8 == 0 && k <= kFp8MaxStagedRow;
}

BackboneWeights upload_backbone_weights(const model::Release& release, DataType activations,
                                        DataType gemm_weights,
                                        const std::function<void(const std::string&)>& progress);

}  // namespace clef::engine::cuda

// The Qwen3.5 text backbone on the GPU (docs/spec/model.md §3), the device twin of
// cpu/backbone.cpp: embeddings, then per layer input RMSNorm -> fused in-projection GEMM -> the
// token mixer (Gated DeltaNet: conv prep, chunked delta rule, gated RMSNorm; or gated attention:
// q/k norm + RoPE, causal attention core, output gate) -> out-projection GEMM with the residual
// fused -> post RMSNorm -> gate|up GEMM -> SwiGLU -> down GEMM (+ residual), and the final norm.
// It only enqueues on a stream: the engine decides between eager runs, graph capture and replay.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/cuda/attention/tuning.h"
#include "engine/cuda/gemm/gemm.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/packing.h"
#include "engine/cuda/weights.h"
#include "engine/cuda/workspace.h"
#include "model/config.h"

namespace clef::engine::cuda {

class StageRecorder;

// What a request with images or videos adds to a forward (one sequence, docs/spec/media.md §6):
// the vision tower's rows replace the pad tokens' embeddings, and the full-attention layers rotate
// with the 3-D positions (interleaved mrope_section). Device pointers.
struct MediaView {
  const void* rows = nullptr;         // act [n, hidden]: image rows, then video rows
  const int32_t* pad_rows = nullptr;  // [n]: the token row each replaces
  int n = 0;
  const int32_t* positions = nullptr;  // [3][Tp]: temporal, height, width
};

class CudaBackbone {
 public:
  CudaBackbone(const model::TextConfig& config, const BackboneWeights& weights, Gemm& gemm,
               KernelPath path);

  // ids (a.ids, Tp rows, already on the device) -> a.final_hidden. `rec` (optional) marks each op
  // with its stage: "gemm", "gdn_core", "attention", "norms_elementwise". `pack` (optional): the
  // rows hold several sequences (packing.h); none: one sequence. `media` (optional, one sequence
  // only): a request with images or videos. `layers` (diagnostics, >= 0): only the first that
  // many decoder layers, then the final norm; -1: all.
  void enqueue(const Activations& a, int Tp, cudaStream_t s, StageRecorder* rec = nullptr,
               const PackView* pack = nullptr, const MediaView* media = nullptr,
               int layers = -1) const;
  // Chooses the algorithm of every GEMM at Tp rows (timing: never inside a capture). With FP8
  // weights it also times each FP8 GEMM shape against the same shape in bf16 and keeps bf16 at
  // this bucket where FP8 measures slower; the weights of such a shape get a bf16 copy (their
  // dequantised FP8 values, so either choice computes with the same weights up to bf16 rounding).
  void tune(const Activations& a, int Tp, cudaStream_t s);
  // "NxK" of each FP8 GEMM shape that runs in bf16 at Tp (empty: all FP8, or no FP8 weights).
  std::vector<std::string> bf16_fallbacks(int Tp) const;
  // Every linear layer of the forward at Tp rows, in order: the GEMM floor of a forward.
  void enqueue_gemms_only(const Activations& a, int Tp, cudaStream_t s) const;
  // The GEMMs of one layer at Tp rows: in_proj, in_proj_ba (FP8 GDN layers, else empty: N = 0),
  // out_proj (+ residual), gate_up, down (+ residual). A GEMM with FP8 weights reads a.act_q /
  // a.act_scale, which its producer wrote.
  std::array<GemmProblem, 5> layer_gemms(const LayerWeights& L, const Activations& a, int Tp) const;

  // The variant each kernel dispatcher runs at this model's shapes under path(), by op name
  // (as the dispatchers name them).
  std::map<std::string, std::string> kernel_variants() const;
  // The bf16 attention kernel of the full-attention layers at Tp rows (tuning.h): the pick where
  // attn_prep can write K and V in key tiles (head dims that are a multiple of 16), so wg64ote /
  // wg64te at the flash shape on sm_90 (attn_prep then writes the tiles). packed: a packed
  // forward's, by rows (wg64) under batch invariance (batch_invariance.h).
  AttnVariant attention_kernel(int Tp, bool packed = false) const;

  // Whether layers with a regrouped gate_up (LayerWeights::gate_up_group) run the SwiGLU-epilogue
  // GEMM (gemm/swiglu_gemm.h) at Tp rows: from swiglu_gemm_min_rows() on under KernelPath::Auto,
  // unless check_swiglu_gemm turned it off.
  bool swiglu_gemm_at(int Tp) const;
  // Start-up check (after tune() at Tp, a bucket below swiglu_gemm_min_rows(); 0: none): the fused
  // kernel's output against cuBLASLt gate_up + swiglu on the same random rows at Tp, bit for bit.
  // Under batch invariance a difference turns the fused kernel off (a lone request below the row
  // threshold and a pack above it would round otherwise). The start-up line; empty when no layer
  // has a regrouped gate_up.
  std::string check_swiglu_gemm(const Activations& a, int Tp, cudaStream_t s);

  const BackboneWeights& weights() const { return w_; }
  KernelPath path() const { return path_; }

 private:
  // Whether the regrouped layers run the SwiGLU GEMM at all (then from swiglu_gemm_min_rows()).
  bool swiglu_gemm_used() const;
  template <typename E>
  void enqueue_as(const Activations& a, int Tp, cudaStream_t s, StageRecorder* rec,
                  const PackView* pack, const MediaView* media, int layers) const;

  // What an FP8-or-bf16 choice is made for: N, K, ldc, accumulate.
  using ShapeKey = std::array<int, 4>;
  static ShapeKey shape_key(const GemmProblem& p);
  // The GEMMs' inputs in bf16 (the producers' plain outputs), by layer_gemms' index.
  static std::array<void*, 5> bf16_inputs(const Activations& a);
  double time_ms(const GemmProblem& p, cudaStream_t s) const;

  const model::TextConfig& cfg_;
  const BackboneWeights& w_;
  std::map<int, std::set<ShapeKey>> bf16_at_;   // per bucket: FP8 shapes that run bf16
  std::map<const void*, WeightRef> bf16_copy_;  // FP8 weight (codes pointer) -> its bf16 copy
  std::vector<DeviceBuffer> bf16_storage_;
  DeviceBuffer timing_weight_;  // a bf16 weight for timing a shape before its copy exists
  Gemm& gemm_;
  KernelPath path_;
  int rotary_dim_ = 0;
  bool swiglu_gemm_on_ = true;
};

}  // namespace clef::engine::cuda

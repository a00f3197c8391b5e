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
#include <string>

#include "engine/cuda/gemm/gemm.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/packing.h"
#include "engine/cuda/weights.h"
#include "engine/cuda/workspace.h"
#include "model/config.h"

namespace clef::engine::cuda {

class StageRecorder;

class CudaBackbone {
 public:
  CudaBackbone(const model::TextConfig& config, const BackboneWeights& weights, Gemm& gemm,
               KernelPath path);

  // ids (a.ids, Tp rows, already on the device) -> a.final_hidden. `rec` (optional) marks each op
  // with its stage: "gemm", "gdn_core", "attention", "norms_elementwise". `pack` (optional): the
  // rows hold several sequences (packing.h); none: one sequence.
  void enqueue(const Activations& a, int Tp, cudaStream_t s, StageRecorder* rec = nullptr,
               const PackView* pack = nullptr) const;
  // Chooses the algorithm of every GEMM at Tp rows (timing: never inside a capture).
  void tune(const Activations& a, int Tp, cudaStream_t s) const;
  // Every linear layer of the forward at Tp rows, in order: the GEMM floor of a forward.
  void enqueue_gemms_only(const Activations& a, int Tp, cudaStream_t s) const;
  // The GEMMs of one layer at Tp rows: in_proj, in_proj_ba (FP8 GDN layers, else empty: N = 0),
  // out_proj (+ residual), gate_up, down (+ residual). A GEMM with FP8 weights reads a.act_q /
  // a.act_scale, which its producer wrote.
  std::array<GemmProblem, 5> layer_gemms(const LayerWeights& L, const Activations& a, int Tp) const;

  // The variant each kernel dispatcher runs at this model's shapes under path(), by op name
  // (as the dispatchers name them).
  std::map<std::string, std::string> kernel_variants() const;

  const BackboneWeights& weights() const { return w_; }
  KernelPath path() const { return path_; }

 private:
  template <typename E>
  void enqueue_as(const Activations& a, int Tp, cudaStream_t s, StageRecorder* rec,
                  const PackView* pack) const;

  const model::TextConfig& cfg_;
  const BackboneWeights& w_;
  Gemm& gemm_;
  KernelPath path_;
  int rotary_dim_ = 0;
};

}  // namespace clef::engine::cuda

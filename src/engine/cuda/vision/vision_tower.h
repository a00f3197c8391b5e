// The Qwen3.5 vision tower on the GPU (docs/spec/media.md §7), the device twin of
// cpu/vision_tower.cpp: patch rows -> merged rows in the backbone's width, one per image / video
// pad token. Patch embed, attention projections, MLP and merger are cuBLASLt GEMMs with the bias
// fused (gemm.h); the row kernels are kernels/vision.h; attention is the attention core's
// non-causal mode over one segment per image / video temporal group, heads zero-padded to a head
// dim it runs (the output projection's weight is padded alike, so the padding never shows).
// Activations are bf16 (production) or fp32 (parity); GELU, LayerNorm and the score scale in fp32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/data_type.h"
#include "engine/cuda/gemm/gemm.h"
#include "engine/cuda/kernel_path.h"
#include "media/visual_input.h"
#include "model/release.h"

namespace clef::engine::cuda {

class StageRecorder;

class CudaVisionTower {
 public:
  // Uploads the release's tower (model.visual.*) in the activation type `act`; `path` picks the
  // row kernels' variants (kernels/vision.h) and, under Auto in bf16, fuses the MLP's GELU into
  // the fc1 GEMM's epilogue (one rounding after the GELU instead of one before it and one after;
  // Generic and float32 keep the reference's separate GELU). Throws std::runtime_error when the
  // release has none or its shapes are not the spec's.
  CudaVisionTower(const model::Release& release, DataType act, Gemm& gemm, KernelPath path,
                  const std::function<void(const std::string&)>& progress);

  // Throws std::runtime_error naming what is wrong unless `visual` fits the tower: the media
  // layer's check (grids of t >= 1 slices of an even h x w, exactly their frames' bytes),
  // then at least one and not more patches than one forward takes.
  static void check(const media::VisualInput& visual);

  // Enqueues the tower on `visual` (check()ed) and returns the
  // device rows [tokens(), out_hidden] in the activation type: every image's merged rows, then
  // every video's. Valid until the next call. `rec` (optional) marks the stages "vision.gemm",
  // "vision.attention" and "vision.elementwise".
  const void* enqueue(const media::VisualInput& visual, cudaStream_t s,
                      StageRecorder* rec = nullptr);
  int64_t tokens() const { return tokens_; }
  const void* last_rows() const { return out_ptr_; }
  // Every GEMM of the tower for these grids alone (the tower's GEMM floor when timed).
  void enqueue_gemms_only(const media::VisualInput& visual, cudaStream_t s);

  int out_width() const { return out_w_; }
  // The row kernels' variant per op at this tower's shapes (alignment aside).
  std::map<std::string, std::string> kernel_variants() const;
  // The bf16 attention kernel variant the tower runs for R rows (tuning.h's name): the engine's
  // pick, but never the sm_90-only Hopper kernel under --kernels generic.
  std::string attention_kernel(int R = 4096) const;
  size_t weight_bytes() const { return weight_bytes_; }
  size_t workspace_bytes() const { return work_.bytes(); }

 private:
  struct Linear {
    const void* w = nullptr;  // [n, k] in the activation type
    const void* b = nullptr;  // [n]
    int n = 0, k = 0;
  };
  struct Block {
    const float *norm1_w = nullptr, *norm1_b = nullptr, *norm2_w = nullptr, *norm2_b = nullptr;
    Linear qkv, proj, fc1, fc2;  // proj: k = heads x padded head dim (zero columns)
  };
  // The per-request buffers, carved from work_ for `rows` patch rows.
  struct Buffers {
    void *pixels, *frames, *x, *u, *qkv, *q, *k, *v, *attn, *mid, *merged, *out;
    int32_t *rc, *tiles;
  };
  Buffers reserve(int64_t rows, size_t frame_bytes, int tile_slots, bool kv_tiles);
  void gemm(const Linear& l, const void* x, int rows, void* y, bool accumulate, cudaStream_t s,
            bool gelu = false);
  template <typename E>
  void enqueue_as(const media::VisualInput& visual, cudaStream_t s, StageRecorder* rec,
                  bool gemms_only);

  const model::Release& rel_;
  DataType act_;
  Gemm& gemm_;
  KernelPath path_;
  bool fused_gelu_;  // fc1 + GELU in one GEMM (see the constructor)
  int W_ = 0, I_ = 0, heads_ = 0, hd_ = 0, hdp_ = 0, side_ = 0, out_w_ = 0, M_ = 0;
  Linear patch_, merger_fc1_, merger_fc2_;
  const void* pos_table_ = nullptr;
  const float *merger_norm_w_ = nullptr, *merger_norm_b_ = nullptr, *inv_freq_ = nullptr;
  std::vector<Block> blocks_;
  std::vector<DeviceBuffer> storage_;
  size_t weight_bytes_ = 0;
  DeviceBuffer work_;
  PinnedBuffer staging_;  // the row tables and the frames
  int64_t tokens_ = 0;
  const void* out_ptr_ = nullptr;  // the last enqueue's rows
};

}  // namespace clef::engine::cuda

// The joint schema head (spec/model.md §4) on the GPU: the backbone's final hidden states (device)
// + the request's spans -> one logit per option. Built once from the Release (the head's tensors
// are uploaded at construction); run() does no per-token host work: it copies one small span table
// per request.
//
// Numerics. Float32 mode: fp32 everywhere (cuBLASLt fp32 GEMMs without TF32), for parity with the
// CPU engine. BFloat16 mode: the GEMMs with T rows (memory projection and the key/value projections
// of the memory in every evidence and decoder layer: nearly all of the head's FLOPs) take bf16
// operands with fp32 accumulation; everything else stays fp32 (allowed by the spec, and more
// accurate than the reference).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "encoding/encode.h"
#include "engine/cuda/cuda_check.h"
#include "model/release.h"

namespace clef::engine::cuda {

enum class HeadPrecision { Float32, BFloat16 };

class HeadGemm;

class CudaJointHead {
 public:
  // lm_head_bf16: optional device copy of lm_head.weight [V, D] in bf16 owned by the caller (it
  // must outlive the head); when null the head uploads its own copy (2 GB for Clef-flash) in bf16,
  // or in fp32 when the release keeps unrounded fp32 values (LoadOptions::round_to_bf16 = false).
  CudaJointHead(const model::Release& release, HeadPrecision precision,
                const __nv_bfloat16* lm_head_bf16 = nullptr,
                const std::function<void(const std::string&)>& progress = {});
  ~CudaJointHead();
  CudaJointHead(const CudaJointHead&) = delete;
  CudaJointHead& operator=(const CudaJointHead&) = delete;

  // hidden: device [T, D], row-major: __nv_bfloat16 in BFloat16 mode, float in Float32 mode (the
  // backbone's final-norm output for enc.input_ids). Returns logits[k] = question k's option logits
  // in MODEL order. Synchronises `stream` before returning. Throws std::runtime_error on an empty
  // or out-of-range span, a token id outside the vocabulary, or a CUDA failure. Not thread-safe
  // (the head owns its scratch buffers).
  // `marks` (profiling, optional) is called after each enqueued op with its kind ("head.gemm",
  // "head.gemm_bf16", "head.linear_few_rows", "head.small"), e.g. to record an event.
  std::vector<std::vector<float>> run(const void* hidden, int T,
                                      const encoding::EncodedRequest& enc, cudaStream_t stream,
                                      std::function<void(const char*)> marks = nullptr);

  HeadPrecision precision() const { return precision_; }
  // Device or pinned buffers (re)allocated by run() so far: constant once the head has run the
  // largest request it will see (the engine's prepare() does that).
  size_t allocations() const { return allocations_; }

 private:
  struct Weight {
    DeviceBuffer f32;   // always
    DeviceBuffer bf16;  // matrices: when exact in bf16, and the T-row GEMMs' in BFloat16 mode
    bool bf16_exact = false;
    std::vector<int64_t> shape;
  };
  const Weight& w(const std::string& name) const;
  const float* wf(const std::string& name) const;
  void* scratch(const std::string& name, size_t bytes);
  float* buf(const std::string& name, size_t floats);
  __nv_bfloat16* buf_bf16(const std::string& name, size_t elems);

  // y[rows, N] = x[rows, K] W^T (+ bias) (+ y when accumulate), W = tensor `name` ([N, K] or a row
  // block of it starting at row_off).
  void linear(const float* x, const __nv_bfloat16* x_bf16, int rows, int K, const std::string& name,
              int row_off, int N, float* y, bool accumulate, const float* bias, bool gelu,
              cudaStream_t s);
  void layer_norm(const std::string& name, const float* x, int rows, int n, float* y,
                  __nv_bfloat16* y_bf16, cudaStream_t s);
  // out[nq, W] = MultiheadAttention `name` with queries xq [nq, W] and keys/values from xkv [nk, W]
  // (xkv_bf16: its bf16 copy for the bf16 T-row GEMM, or null).
  void mha(const std::string& name, const float* xq, int nq, const float* xkv,
           const __nv_bfloat16* xkv_bf16, int nk, float* out, const std::string& tag,
           cudaStream_t s);

  void mark(const char* kind) const {
    if (mark_) mark_(kind);
  }

  HeadPrecision precision_;
  std::function<void(const char*)> mark_;
  int D_ = 0, W_ = 0, heads_ = 0, F_ = 0, routing_ = 0, layers_ = 0;
  int64_t vocab_ = 0;
  float prior_scale_ = 0, joint_scale_ = 0, gate_ = 0;
  std::map<std::string, Weight> weights_;
  DeviceBuffer lm_head_own_;
  const void* lm_head_ = nullptr;
  bool lm_head_is_bf16_ = true;
  std::unique_ptr<HeadGemm> gemm_;
  std::map<std::string, DeviceBuffer> scratch_;
  DeviceBuffer host_table_dev_;
  // Pinned staging for the span table and the logits: the table's upload is then queued behind the
  // backbone instead of waiting for it, so the whole head is enqueued while the backbone runs.
  PinnedBuffer table_pinned_, logits_pinned_;
  size_t allocations_ = 0;
  template <typename Buffer>
  void grow(Buffer& b, size_t bytes) {
    if (bytes > b.bytes()) ++allocations_;
    b.resize(bytes);
  }
};

}  // namespace clef::engine::cuda

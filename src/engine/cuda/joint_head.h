// The joint schema head (docs/spec/model.md §4), the device twin of cpu/joint_head.cpp, on the GPU:
// the backbone's final hidden states (device)
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

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "encoding/encode.h"
#include "engine/cuda/cuda_check.h"
#include "model/release.h"

namespace clef::engine::cuda {

enum class HeadPrecision { Float32, BFloat16 };

class Gemm;

// The head's tensors, resolved by name once at load into typed fields. Matrices keep an fp32 copy
// and, when bf16 holds them exactly (every release under the loading rule) or when they feed a
// T-row GEMM in BFloat16 mode, a bf16 copy.
struct HeadMatrix {
  const float* f32 = nullptr;
  const __nv_bfloat16* bf16 = nullptr;
  bool bf16_exact = false;
  bool matrix = false;     // a 2-D tensor
  int rows = 0, cols = 0;  // [N, K]; a vector: [n, 1]
};
struct HeadLayerNorm {
  const float* weight = nullptr;
  const float* bias = nullptr;
};
struct HeadLinear {
  HeadMatrix weight;
  const float* bias = nullptr;  // null when the layer has none
};
struct HeadAttention {  // torch.nn.MultiheadAttention: fused [q | k | v] in-projection
  HeadLinear in_proj, out_proj;
};
struct EvidenceLayer {
  HeadLayerNorm memory_norm, query_norm, feedforward_norm;
  HeadAttention attention;
  HeadLinear feedforward_in, feedforward_out;  // feedforward.0, feedforward.3
};
struct DecoderLayer {  // norm_first nn.TransformerDecoderLayer
  HeadLayerNorm norm1, norm2, norm3;
  HeadAttention self_attn, cross_attn;  // self_attn, multihead_attn
  HeadLinear linear1, linear2;
};
struct HeadWeights {
  HeadLayerNorm hidden_norm, option_summary_norm, field_norm, option_norm;
  HeadLinear memory_projection, option_context_projection, option_lexical_projection,
      option_question_projection, question_projection, global_projection;
  const float* type_embedding = nullptr;  // [3, W]
  std::vector<EvidenceLayer> evidence;
  std::vector<DecoderLayer> layers;
  HeadLinear residual_in, residual_out;  // residual_scorer.0, residual_scorer.3
  float prior_scale = 0, joint_scale = 0, gate = 0;
  std::vector<DeviceBuffer> storage;
};

class CudaJointHead {
 public:
  // gemm: the engine's GEMM module (one handle, workspace and plan cache for backbone and head;
  // it must outlive the head). lm_head_bf16: optional device copy of lm_head.weight [V, D] in
  // bf16 owned by the caller (it must outlive the head); when null the head uploads its own copy
  // (2 GB for Clef-flash) in bf16, or in fp32 when the release keeps unrounded fp32 values
  // (LoadOptions::round_to_bf16 = false). Throws std::runtime_error naming a missing or misshapen
  // head tensor.
  CudaJointHead(const model::Release& release, HeadPrecision precision, Gemm& gemm,
                const __nv_bfloat16* lm_head_bf16 = nullptr,
                const std::function<void(const std::string&)>& progress = {});
  ~CudaJointHead();
  CudaJointHead(const CudaJointHead&) = delete;
  CudaJointHead& operator=(const CudaJointHead&) = delete;

  // One request: hidden is device [T, D], row-major: __nv_bfloat16 in BFloat16 mode, float in
  // Float32 mode (the backbone's final-norm output for enc.input_ids). Returns logits[k] = question
  // k's option logits in MODEL order. Synchronises `stream` before returning. Throws
  // std::runtime_error on an empty or out-of-range span, a token id outside the vocabulary, or a
  // CUDA failure. Not thread-safe (the head owns its scratch buffers).
  // `marks` (profiling, optional) is called after each enqueued op with its kind ("head.gemm",
  // "head.gemm_bf16", "head.linear_few_rows", "head.small"), e.g. to record an event.
  std::vector<std::vector<float>> run(const void* hidden, int T,
                                      const encoding::EncodedRequest& enc, cudaStream_t stream,
                                      std::function<void(const char*)> marks = nullptr);

  // A batch with one synchronisation: begin() validates every request and stages all span tables
  // (throwing before anything is enqueued), enqueue() queues the next request's head on its hidden
  // states (which may be overwritten by later stream work once it is queued), finish() waits once
  // and returns each request's logits in batch order. Each request's result is the same as run()'s.
  void begin(const std::vector<const encoding::EncodedRequest*>& batch, cudaStream_t stream);
  void enqueue(const void* hidden, cudaStream_t stream,
               std::function<void(const char*)> marks = nullptr);
  std::vector<std::vector<std::vector<float>>> finish(cudaStream_t stream);

  // Grows the batch staging (span tables, logits) for batches of up to `tokens` tokens in all:
  // a request's table is 4 questions + 3 options + 1 + T ints, and each question and option has a
  // span of its own tokens, so a batch's tables are at most 6 x its tokens and its logits at most
  // its tokens.
  void reserve_batch(size_t tokens);

  HeadPrecision precision() const { return precision_; }
  // Device or pinned buffers (re)allocated by run() so far: constant once the head has run the
  // largest request it will see (the engine's prepare() does that).
  size_t allocations() const { return allocations_; }

 private:
  // A request's span table inside the batch's staging, and where its logits go.
  struct Staged {
    const encoding::EncodedRequest* enc = nullptr;
    int T = 0, nq = 0, N = 0, max_opts = 0;
    size_t table_off = 0, table_len = 0, logits_off = 0;
    size_t off_owner = 0, off_first = 0, off_types = 0, off_ids = 0;  // within the table
  };
  Staged stage(const encoding::EncodedRequest& enc, std::vector<int32_t>& table) const;

  // A device buffer grown on demand with headroom (a reallocation frees the old one, and
  // cudaFree waits for the device).
  template <typename T>
  T* scratch(DeviceBuffer& b, size_t elems) {
    const size_t bytes = std::max<size_t>(elems * sizeof(T), 1);
    if (bytes > b.bytes()) grow(b, bytes + bytes / 4);
    return b.get<T>();
  }
  // The attention's buffers, one set per use (evidence, decoder self, decoder cross).
  struct AttentionScratch {
    DeviceBuffer q, kv, scores, att;
  };
  // Every buffer of one run, by what it holds (sizes follow T, questions and options).
  struct Scratch {
    DeviceBuffer S, S16, M, M16, Qm, Cm, Lm, O, oq, qn, mem, mem16, ffh, f0, summ, sn, gp, F, n1,
        Fn, U, feat, rh, res, logits;
    AttentionScratch evidence, self, cross;
  };

  // y[rows, N] = x[rows, K] W^T (+ bias) (+ y when accumulate), W = rows [row_off, row_off + N)
  // of `lin`.
  void linear(const float* x, const __nv_bfloat16* x_bf16, int rows, int K, const HeadLinear& lin,
              int row_off, int N, float* y, bool accumulate, const float* bias, bool gelu,
              cudaStream_t s);
  void layer_norm(const HeadLayerNorm& ln, const float* x, int rows, int n, float* y,
                  __nv_bfloat16* y_bf16, cudaStream_t s);
  // out[nq, W] += MultiheadAttention with queries xq [nq, W] and keys/values from xkv [nk, W]
  // (xkv_bf16: its bf16 copy for the bf16 T-row GEMM, or null).
  void mha(const HeadAttention& at, const float* xq, int nq, const float* xkv,
           const __nv_bfloat16* xkv_bf16, int nk, float* out, AttentionScratch& sc, cudaStream_t s);
  void gemm_f32(int M, int N, int K, const float* a, int lda, int64_t a_bs, const float* b, int ldb,
                int64_t b_bs, bool b_is_nk, float* c, int ldc, int64_t c_bs, int batch,
                cudaStream_t s);

  void mark(const char* kind) const {
    if (mark_) mark_(kind);
  }

  HeadPrecision precision_;
  Gemm& gemm_;
  std::function<void(const char*)> mark_;
  int D_ = 0, W_ = 0, heads_ = 0, F_ = 0;
  int64_t vocab_ = 0;
  HeadWeights w_;
  DeviceBuffer lm_head_own_;
  const void* lm_head_ = nullptr;
  bool lm_head_is_bf16_ = true;
  Scratch scratch_;
  DeviceBuffer host_table_dev_;
  // Pinned staging for the span table and the logits: the table's upload is then queued behind the
  // backbone instead of waiting for it, so the whole head is enqueued while the backbone runs.
  PinnedBuffer table_pinned_, logits_pinned_;
  std::vector<Staged> staged_;  // the batch between begin() and finish()
  size_t enqueued_ = 0;
  size_t allocations_ = 0;
  template <typename Buffer>
  void grow(Buffer& b, size_t bytes) {
    if (bytes > b.bytes()) ++allocations_;
    b.resize(bytes);
  }
};

}  // namespace clef::engine::cuda

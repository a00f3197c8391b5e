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
  // "head.gemm_bf16", "head.linear_few_rows", "head.attention", "head.small"), e.g. to record an
  // event.
  std::vector<std::vector<float>> run(const void* hidden, int T,
                                      const encoding::EncodedRequest& enc, cudaStream_t stream,
                                      std::function<void(const char*)> marks = nullptr);

  // A batch with one synchronisation: begin() validates every request and stages the tables of
  // every group (throwing before anything is enqueued); a group is `group_sizes[g]` consecutive
  // requests whose hidden rows lie back to back (a packed forward's rows; default: one request a
  // group). enqueue() queues the next group's head on its hidden states (which may be overwritten
  // by later stream work once it is queued): one launch set for the whole group, each request's
  // spans, routing and scoring by offsets. finish() waits once and returns each request's logits in
  // batch order. A request's logits do not depend on its group (head_attention.h).
  void begin(const std::vector<const encoding::EncodedRequest*>& batch, cudaStream_t stream,
             const std::vector<int>& group_sizes = {});
  // `hidden_read` (optional) is recorded on `stream` once the group's last read of `hidden` is
  // enqueued (its first op): a later writer of those rows on another stream waits for it.
  void enqueue(const void* hidden, cudaStream_t stream,
               std::function<void(const char*)> marks = nullptr, cudaEvent_t hidden_read = nullptr);
  // What begin() would refuse in this request (spans, questions, token ids), without staging
  // anything: a caller that begins the head later can refuse the request now.
  void check(const encoding::EncodedRequest& enc) const;
  std::vector<std::vector<std::vector<float>>> finish(cudaStream_t stream);

  // Grows the staging (tables, logits) and the scratch for groups of up to `max_requests`
  // requests and `tokens` rows, each request within `max_questions` / `max_options` and with no
  // more questions or options than tokens (what the encoder produces); a larger group still runs,
  // growing the buffers once.
  void reserve_batch(size_t tokens, int max_questions, int max_options, int max_requests);

  HeadPrecision precision() const { return precision_; }
  // Device or pinned buffers (re)allocated by run() so far: constant once the head has run the
  // largest request it will see (the engine's prepare() does that).
  size_t allocations() const { return allocations_; }

 private:
  // A request inside the batch: where its logits go.
  struct Staged {
    const encoding::EncodedRequest* enc = nullptr;
    size_t logits_off = 0;
  };
  // What a group's launch set is sized by.
  struct GroupSizes {
    int rows = 0, requests = 0, nq = 0, N = 0, max_opts = 0, parts = 0;
  };
  // A group's table inside the batch's staging (int32 offsets from table_off) and its plans.
  struct Group {
    GroupSizes n;
    size_t table_off = 0, table_len = 0, logits_off = 0;
    size_t q_spans = 0, o_spans = 0, owner = 0, first_opt = 0, types = 0, q_req = 0, g_spans = 0,
           ids = 0;
    struct Plan {
      size_t items = 0, combine = 0;
      int item_count = 0, query_count = 0, parts = 0;
    } evidence, cross, self;
  };
  // Appends one request's spans and ids to the group's table parts (validated; rows, questions
  // and options numbered within the group).
  struct GroupBuild;
  void stage(const encoding::EncodedRequest& enc, GroupBuild& g) const;

  // A device buffer grown on demand with headroom (a reallocation frees the old one, and
  // cudaFree waits for the device).
  template <typename T>
  T* scratch(DeviceBuffer& b, size_t elems) {
    const size_t bytes = std::max<size_t>(elems * sizeof(T), 1);
    if (bytes > b.bytes()) grow(b, bytes + bytes / 4);
    return b.get<T>();
  }
  // Every buffer of one group's run, by what it holds (sizes follow its rows, questions, options
  // and requests); the attention's (q, kv, partial softmax, att) are shared by its three uses.
  struct Scratch {
    DeviceBuffer S, S16, M, M16, Qm, Cm, Lm, G, O, oq, qn, mem, mem16, ffh, f0, summ, sn, gp, F, n1,
        Fn, U, feat, rh, res, logits;
    DeviceBuffer att_q, att_kv, att_ml, att_acc, att_out;
  };
  // Sizes every scratch buffer for a group (what enqueue uses, and reserve_batch's bound).
  void size_scratch(const GroupSizes& n);

  // y[rows, N] = x[rows, K] W^T (+ bias) (+ y when accumulate), W = rows [row_off, row_off + N)
  // of `lin`. few: the rows are questions, options or requests (head_kernels::skinny_linear when
  // the weight is bf16-exact: each row's value is then the same for any row count), not tokens.
  void linear(const float* x, const __nv_bfloat16* x_bf16, int rows, int K, const HeadLinear& lin,
              int row_off, int N, float* y, bool accumulate, const float* bias, bool gelu, bool few,
              cudaStream_t s);
  void layer_norm(const HeadLayerNorm& ln, const float* x, int rows, int n, float* y,
                  __nv_bfloat16* y_bf16, cudaStream_t s);
  // out[nq, W] += MultiheadAttention with queries xq [nq, W] and keys/values from xkv [nk, W]
  // (xkv_bf16: its bf16 copy for the bf16 T-row GEMM, or null; kv_few: xkv's rows are few, as
  // the questions of self-attention), each query over its own request's keys (plan).
  void mha(const HeadAttention& at, const float* xq, int nq, const float* xkv,
           const __nv_bfloat16* xkv_bf16, int nk, bool kv_few, const Group::Plan& plan,
           const int32_t* table, float* out, cudaStream_t s);
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
  std::vector<Group> groups_;
  size_t enqueued_ = 0;  // groups
  size_t allocations_ = 0;
  template <typename Buffer>
  void grow(Buffer& b, size_t bytes) {
    if (bytes > b.bytes()) ++allocations_;
    b.resize(bytes);
  }
};

}  // namespace clef::engine::cuda

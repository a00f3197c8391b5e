#include "engine/cuda/head.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/cuda/head_gemm.h"
#include "engine/cuda/head_kernels.h"
#include "model/bf16.h"

namespace clef::engine::cuda {
namespace {

constexpr float kLnEps = 1e-5f;  // every head LayerNorm (PyTorch default)
// Linears with at most this many rows (questions, options, the global token) take
// head_kernels::skinny_linear; longer ones (the T-row memory GEMMs) cuBLASLt.
constexpr int kSkinnyMaxRows = 64;

namespace hk = head_kernels;

// The weights of the GEMMs with T rows: kept in bf16 too for the BFloat16 mode.
bool is_memory_gemm_weight(const std::string& name) {
  return name == "memory_projection.weight" ||
         (name.ends_with(".in_proj_weight") &&
          (name.starts_with("evidence_layers.") ||
           name.find(".multihead_attn.") != std::string::npos));
}

void check_span(encoding::Span s, int T, const std::string& what) {
  if (s.start < 0 || s.end > T || s.start > s.end)
    throw std::runtime_error("joint head: " + what + " span [" + std::to_string(s.start) + ", " +
                             std::to_string(s.end) + ") is outside the " + std::to_string(T) +
                             "-token input");
  if (s.start == s.end) throw std::runtime_error("joint head: " + what + " span is empty");
}

}  // namespace

CudaJointHead::CudaJointHead(const model::Release& release, HeadPrecision precision,
                             const __nv_bfloat16* lm_head_bf16,
                             const std::function<void(const std::string&)>& progress)
    : precision_(precision) {
  const model::HeadConfig& c = release.head;
  D_ = c.hidden_size;
  W_ = c.width;
  heads_ = c.heads;
  F_ = c.feedforward;
  routing_ = c.routing_layers;
  layers_ = c.layers;
  if (D_ <= 0 || W_ <= 0 || heads_ <= 0 || W_ % heads_ != 0)
    throw std::runtime_error("joint head: width must be a positive multiple of heads");

  const bool bf16 = precision_ == HeadPrecision::BFloat16;
  std::vector<float> host;
  std::vector<uint16_t> host_bf16;
  for (const auto& [name, t] : release.head_tensors()) {
    Weight wt;
    wt.shape = t.shape;
    const size_t n = t.numel();
    host = t.to_float();
    wt.f32 = DeviceBuffer(std::max<size_t>(n, 1) * sizeof(float));
    CLEF_CUDA_CHECK(
        cudaMemcpy(wt.f32.get(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    // A bf16 copy of every matrix that bf16 holds exactly (all of them under the loading rule):
    // the few-row linears stream it at half the bytes with the same fp32 products. The bf16 mode's
    // T-row GEMM weights get one in any case.
    const bool matrix = t.shape.size() == 2;
    host_bf16.resize(matrix ? n : 0);
    bool exact = matrix;
    for (size_t i = 0; i < host_bf16.size(); ++i) {
      host_bf16[i] = model::float_to_bf16(host[i]);
      exact = exact && (model::bf16_to_float(host_bf16[i]) == host[i] || host[i] != host[i]);
    }
    wt.bf16_exact = exact;
    if (exact || (bf16 && is_memory_gemm_weight(name))) {
      wt.bf16 = DeviceBuffer(std::max<size_t>(n, 1) * 2);
      CLEF_CUDA_CHECK(cudaMemcpy(wt.bf16.get(), host_bf16.data(), n * 2, cudaMemcpyHostToDevice));
    }
    weights_.emplace(name, std::move(wt));
  }
  auto scalar = [&](const char* name) {
    const model::Tensor& t = release.head_tensor(name);
    if (t.numel() != 1)
      throw std::runtime_error(std::string("joint head: ") + name + " is not a scalar");
    return t.at(0);
  };
  // Clamped in log space first, then exponentiated (as the reference, in fp32).
  const float ln100 = static_cast<float>(std::log(100.0));
  prior_scale_ = std::exp(std::min(scalar("prior_logit_scale"), ln100));
  joint_scale_ = std::exp(std::min(scalar("joint_logit_scale"), ln100));
  gate_ = 1.f / (1.f + std::exp(-scalar("residual_gate")));

  const model::Tensor& E = release.backbone("lm_head.weight");
  if (E.shape.size() != 2 || E.shape[1] != D_)
    throw std::runtime_error("joint head: hidden_size " + std::to_string(D_) +
                             " does not match lm_head.weight");
  vocab_ = E.shape[0];
  if (lm_head_bf16) {
    lm_head_ = lm_head_bf16;
  } else {
    // Exact in bf16 whenever the engine uses bf16-rounded values (the default loading rule).
    lm_head_is_bf16_ = E.dtype == model::DType::BF16 || E.round_to_bf16;
    const size_t elem = lm_head_is_bf16_ ? 2 : 4;
    const size_t rows_per_chunk = std::max<int64_t>(1, (size_t{64} << 20) / (D_ * elem));
    lm_head_own_ = DeviceBuffer(static_cast<size_t>(vocab_) * D_ * elem);
    std::vector<float> rows;
    for (int64_t r0 = 0; r0 < vocab_; r0 += static_cast<int64_t>(rows_per_chunk)) {
      const size_t nr = std::min<size_t>(rows_per_chunk, static_cast<size_t>(vocab_ - r0));
      rows.resize(nr * D_);
      E.to_float(rows.data(), static_cast<size_t>(r0) * D_, rows.size());
      char* dst = lm_head_own_.get<char>() + static_cast<size_t>(r0) * D_ * elem;
      if (lm_head_is_bf16_) {
        host_bf16.resize(rows.size());
        for (size_t i = 0; i < rows.size(); ++i) host_bf16[i] = model::float_to_bf16(rows[i]);
        CLEF_CUDA_CHECK(cudaMemcpy(dst, host_bf16.data(), rows.size() * 2, cudaMemcpyHostToDevice));
      } else {
        CLEF_CUDA_CHECK(cudaMemcpy(dst, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
      }
      if (progress && (r0 / static_cast<int64_t>(rows_per_chunk)) % 8 == 0)
        progress("joint head: lm_head rows " + std::to_string(r0 + nr) + " / " +
                 std::to_string(vocab_));
    }
    lm_head_ = lm_head_own_.get();
  }
  gemm_ = std::make_unique<HeadGemm>();
}

CudaJointHead::~CudaJointHead() = default;

const CudaJointHead::Weight& CudaJointHead::w(const std::string& name) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) throw std::runtime_error("joint head: missing tensor " + name);
  return it->second;
}

const float* CudaJointHead::wf(const std::string& name) const {
  return w(name).f32.get<float>();
}

void* CudaJointHead::scratch(const std::string& name, size_t bytes) {
  // Grown with headroom: a reallocation frees the old buffer, and cudaFree waits for the device.
  DeviceBuffer& b = scratch_[name];
  bytes = std::max<size_t>(bytes, 1);
  if (bytes > b.bytes()) grow(b, bytes + bytes / 4);
  return b.get();
}

float* CudaJointHead::buf(const std::string& name, size_t floats) {
  return static_cast<float*>(scratch(name, floats * sizeof(float)));
}

__nv_bfloat16* CudaJointHead::buf_bf16(const std::string& name, size_t elems) {
  return static_cast<__nv_bfloat16*>(scratch(name, elems * sizeof(__nv_bfloat16)));
}

void CudaJointHead::linear(const float* x, const __nv_bfloat16* x_bf16, int rows, int K,
                           const std::string& name, int row_off, int N, float* y, bool accumulate,
                           const float* bias, bool gelu, cudaStream_t s) {
  const Weight& wt = w(name);
  if (wt.shape.size() != 2 || wt.shape[1] != K || wt.shape[0] < row_off + N)
    throw std::runtime_error("joint head: " + name + " has an unexpected shape");
  const bool use_bf16 = x_bf16 && wt.bf16.get();
  if (!use_bf16 && rows <= kSkinnyMaxRows && wt.bf16_exact) {
    if (!x) throw std::runtime_error("joint head: no fp32 input for " + name);
    hk::skinny_linear(x, rows, K, wt.bf16.get<__nv_bfloat16>() + static_cast<size_t>(row_off) * K,
                      N, bias, gelu, accumulate, y, s);
    mark("head.linear_few_rows");
    return;
  }
  GemmOperand A, B;
  A.ld = K;
  B.ld = K;
  if (use_bf16) {
    A.ptr = x_bf16;
    B.ptr = wt.bf16.get<__nv_bfloat16>() + static_cast<size_t>(row_off) * K;
  } else {
    if (!x) throw std::runtime_error("joint head: no fp32 input for " + name);
    A.ptr = x;
    B.ptr = wt.f32.get<float>() + static_cast<size_t>(row_off) * K;
  }
  gemm_->run(use_bf16, rows, N, K, A, B, true, y, N, 0, 1, 1.f, accumulate ? 1.f : 0.f, s);
  mark(use_bf16 ? "head.gemm_bf16" : "head.gemm");
  hk::bias_act(y, rows, N, bias, gelu, s);
  mark("head.small");
}

void CudaJointHead::layer_norm(const std::string& name, const float* x, int rows, int n, float* y,
                               __nv_bfloat16* y_bf16, cudaStream_t s) {
  hk::layer_norm(x, rows, n, wf(name + ".weight"), wf(name + ".bias"), kLnEps, y, y_bf16, s);
  mark("head.small");
}

void CudaJointHead::mha(const std::string& name, const float* xq, int nq, const float* xkv,
                        const __nv_bfloat16* xkv_bf16, int nk, float* out, const std::string& tag,
                        cudaStream_t s) {
  const int W = W_, hd = W_ / heads_;
  const std::string in_w = name + ".in_proj_weight";
  const float* in_b = wf(name + ".in_proj_bias");
  float* q = buf(tag + ".q", static_cast<size_t>(nq) * W);
  float* kv = buf(tag + ".kv", static_cast<size_t>(nk) * 2 * W);
  float* sc = buf(tag + ".scores", static_cast<size_t>(heads_) * nq * nk);
  float* att = buf(tag + ".att", static_cast<size_t>(nq) * W);
  linear(xq, nullptr, nq, W, in_w, 0, W, q, false, in_b, false, s);
  linear(xkv, xkv_bf16, nk, W, in_w, W, 2 * W, kv, false, in_b + W, false, s);
  // Per head: scores = q_h k_h^T / sqrt(hd) -> softmax -> att_h = P v_h (batched over heads).
  GemmOperand A{q, W, hd}, B{kv, 2 * W, hd};
  gemm_->run(false, nq, nk, hd, A, B, true, sc, nk, static_cast<int64_t>(nq) * nk, heads_, 1.f, 0.f,
             s);
  mark("head.gemm");
  hk::softmax_rows(sc, heads_ * nq, nk, 1.f / std::sqrt(static_cast<float>(hd)), s);
  mark("head.small");
  GemmOperand P{sc, nk, static_cast<int64_t>(nq) * nk}, V{kv + W, 2 * W, hd};
  gemm_->run(false, nq, hd, nk, P, V, false, att, W, hd, heads_, 1.f, 0.f, s);
  mark("head.gemm");
  linear(att, nullptr, nq, W, name + ".out_proj.weight", 0, W, out, true,
         wf(name + ".out_proj.bias"), false, s);
}

std::vector<std::vector<float>> CudaJointHead::run(const void* hidden, int T,
                                                   const encoding::EncodedRequest& enc,
                                                   cudaStream_t s,
                                                   std::function<void(const char*)> marks) {
  struct Reset {  // marks live for this call only
    std::function<void(const char*)>& m;
    ~Reset() { m = nullptr; }
  } reset{mark_};
  mark_ = std::move(marks);
  const int D = D_, W = W_;
  const bool bf16 = precision_ == HeadPrecision::BFloat16;
  if (T <= 0 || static_cast<size_t>(T) != enc.input_ids.size())
    throw std::runtime_error("joint head: hidden states do not match the encoded input");
  if (enc.questions.empty()) throw std::runtime_error("joint head: no questions");

  // Span table (host, validated): question spans, option spans, option owners, first option per
  // question, question types, then the input ids.
  const int nq = static_cast<int>(enc.questions.size());
  int N = 0, max_opts = 0;
  for (const auto& q : enc.questions) {
    if (q.option_spans.empty())
      throw std::runtime_error("joint head: question " + q.id + " has no options");
    N += static_cast<int>(q.option_spans.size());
    max_opts = std::max(max_opts, static_cast<int>(q.option_spans.size()));
  }
  std::vector<int32_t> table;
  table.reserve(2 * nq + 2 * N + N + nq + 1 + nq + T);
  for (const auto& q : enc.questions) {
    check_span(q.question_span, T, "question " + q.id);
    table.push_back(q.question_span.start);
    table.push_back(q.question_span.end);
  }
  for (const auto& q : enc.questions)
    for (const auto& sp : q.option_spans) {
      check_span(sp, T, "option of question " + q.id);
      table.push_back(sp.start);
      table.push_back(sp.end);
    }
  const size_t off_owner = table.size();
  for (int k = 0; k < nq; ++k)
    for (size_t j = 0; j < enc.questions[k].option_spans.size(); ++j) table.push_back(k);
  const size_t off_first = table.size();
  for (int k = 0, j = 0; k <= nq; ++k) {
    table.push_back(j);
    if (k < nq) j += static_cast<int>(enc.questions[k].option_spans.size());
  }
  const size_t off_types = table.size();
  for (const auto& q : enc.questions) {
    const int t = static_cast<int>(q.type);
    if (t < 0 || t > 2) throw std::runtime_error("joint head: unknown question type");
    table.push_back(t);
  }
  const size_t off_ids = table.size();
  for (int32_t id : enc.input_ids) {
    if (id < 0 || id >= vocab_) throw std::runtime_error("joint head: token id outside lm_head");
    table.push_back(id);
  }
  grow(host_table_dev_, table.size() * sizeof(int32_t));
  int32_t* dt = host_table_dev_.get<int32_t>();
  // The previous run synchronised the stream, so the pinned staging buffer is free to reuse.
  grow(table_pinned_, table.size() * sizeof(int32_t));
  std::copy(table.begin(), table.end(), table_pinned_.get<int32_t>());
  CLEF_CUDA_CHECK(cudaMemcpyAsync(dt, table_pinned_.get(), table.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, s));
  const int32_t* q_spans = dt;
  const int32_t* o_spans = dt + 2 * nq;
  const int32_t* owner = dt + off_owner;
  const int32_t* first = dt + off_first;
  const int32_t* types = dt + off_types;
  const int32_t* ids = dt + off_ids;

  // S = hidden_norm(X); M = memory_projection(S).
  float* S = buf("S", static_cast<size_t>(T) * D);
  __nv_bfloat16* S16 = bf16 ? buf_bf16("S16", static_cast<size_t>(T) * D) : nullptr;
  if (bf16)
    hk::layer_norm(static_cast<const __nv_bfloat16*>(hidden), T, D, wf("hidden_norm.weight"),
                   wf("hidden_norm.bias"), kLnEps, S, S16, s);
  else
    hk::layer_norm(static_cast<const float*>(hidden), T, D, wf("hidden_norm.weight"),
                   wf("hidden_norm.bias"), kLnEps, S, nullptr, s);
  mark("head.small");
  float* M = buf("M", static_cast<size_t>(T) * W);
  linear(S, S16, T, D, "memory_projection.weight", 0, W, M, false, nullptr, false, s);
  __nv_bfloat16* M16 = nullptr;
  if (bf16) {
    M16 = buf_bf16("M16", static_cast<size_t>(T) * W);
    hk::to_bf16(M, M16, static_cast<size_t>(T) * W, s);
    mark("head.small");
  }
  const float* g = S + static_cast<size_t>(T - 1) * D;

  // Span means in D space and the option queries O [N, W].
  float* Qm = buf("Qm", static_cast<size_t>(nq) * D);
  float* Cm = buf("Cm", static_cast<size_t>(N) * D);
  float* Lm = buf("Lm", static_cast<size_t>(N) * D);
  hk::span_mean(S, D, q_spans, nq, Qm, s);
  mark("head.small");
  hk::span_mean(S, D, o_spans, N, Cm, s);
  mark("head.small");
  if (lm_head_is_bf16_)
    hk::lexical_mean(static_cast<const __nv_bfloat16*>(lm_head_), D, ids, o_spans, N, Lm, s);
  else
    hk::lexical_mean(static_cast<const float*>(lm_head_), D, ids, o_spans, N, Lm, s);
  mark("head.small");
  float* O = buf("O", static_cast<size_t>(N) * W);
  float* oq = buf("oq", static_cast<size_t>(nq) * W);
  linear(Cm, nullptr, N, D, "option_context_projection.weight", 0, W, O, false, nullptr, false, s);
  linear(Lm, nullptr, N, D, "option_lexical_projection.weight", 0, W, O, true, nullptr, false, s);
  linear(Qm, nullptr, nq, D, "option_question_projection.weight", 0, W, oq, false, nullptr, false,
         s);
  hk::add_rows_gathered(O, oq, owner, N, W, s);
  mark("head.small");

  // Evidence layers: options attend to the normalised memory.
  float* qn = buf("qn", static_cast<size_t>(N) * W);
  float* mem = bf16 ? nullptr : buf("mem", static_cast<size_t>(T) * W);
  __nv_bfloat16* mem16 = bf16 ? buf_bf16("mem16", static_cast<size_t>(T) * W) : nullptr;
  float* ffh = buf("ffh", static_cast<size_t>(std::max(N, nq)) * F_);
  for (int l = 0; l < routing_; ++l) {
    const std::string p = "evidence_layers." + std::to_string(l) + ".";
    layer_norm(p + "memory_norm", M, T, W, mem, mem16, s);
    layer_norm(p + "query_norm", O, N, W, qn, nullptr, s);
    mha(p + "attention", qn, N, mem, mem16, T, O, "ev", s);
    layer_norm(p + "feedforward_norm", O, N, W, qn, nullptr, s);
    linear(qn, nullptr, N, W, p + "feedforward.0.weight", 0, F_, ffh, false,
           wf(p + "feedforward.0.bias"), true, s);
    linear(ffh, nullptr, N, F_, p + "feedforward.3.weight", 0, W, O, true,
           wf(p + "feedforward.3.bias"), false, s);
  }

  // Fields: question projection + option summary + global token + type embedding.
  float* f0 = buf("f0", static_cast<size_t>(nq) * W);
  float* summ = buf("summ", static_cast<size_t>(nq) * W);
  float* sn = buf("sn", static_cast<size_t>(nq) * W);
  float* gp = buf("gp", W);
  float* Fb = buf("F", static_cast<size_t>(nq) * W);
  linear(Qm, nullptr, nq, D, "question_projection.weight", 0, W, f0, false, nullptr, false, s);
  hk::option_summary(O, f0, first, nq, W, max_opts, summ, s);
  mark("head.small");
  layer_norm("option_summary_norm", summ, nq, W, sn, nullptr, s);
  linear(g, nullptr, 1, D, "global_projection.weight", 0, W, gp, false, nullptr, false, s);
  hk::field_init(f0, sn, gp, wf("type_embedding.weight"), types, nq, W, Fb, s);
  mark("head.small");

  // Decoder layers (norm_first TransformerDecoderLayer; cross-attention to the raw memory M).
  float* n1 = buf("n1", static_cast<size_t>(nq) * W);
  for (int l = 0; l < layers_; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    layer_norm(p + "norm1", Fb, nq, W, n1, nullptr, s);
    mha(p + "self_attn", n1, nq, n1, nullptr, nq, Fb, "self", s);
    layer_norm(p + "norm2", Fb, nq, W, n1, nullptr, s);
    mha(p + "multihead_attn", n1, nq, M, M16, T, Fb, "cross", s);
    layer_norm(p + "norm3", Fb, nq, W, n1, nullptr, s);
    linear(n1, nullptr, nq, W, p + "linear1.weight", 0, F_, ffh, false, wf(p + "linear1.bias"),
           true, s);
    linear(ffh, nullptr, nq, F_, p + "linear2.weight", 0, W, Fb, true, wf(p + "linear2.bias"),
           false, s);
  }
  float* Fn = buf("Fn", static_cast<size_t>(nq) * W);
  float* U = buf("U", static_cast<size_t>(N) * W);
  layer_norm("field_norm", Fb, nq, W, Fn, nullptr, s);
  layer_norm("option_norm", O, N, W, U, nullptr, s);

  // Scoring.
  float* feat = buf("feat", static_cast<size_t>(N) * 4 * W);
  float* rh = buf("rh", static_cast<size_t>(N) * W);
  float* res = buf("res", N);
  float* logits = buf("logits", N);
  hk::scorer_features(Fn, U, owner, N, W, feat, s);
  mark("head.small");
  linear(feat, nullptr, N, 4 * W, "residual_scorer.0.weight", 0, W, rh, false,
         wf("residual_scorer.0.bias"), true, s);
  linear(rh, nullptr, N, W, "residual_scorer.3.weight", 0, 1, res, false,
         wf("residual_scorer.3.bias"), false, s);
  hk::final_logits(Lm, Qm, g, Fn, U, res, owner, N, D, W, prior_scale_, joint_scale_, gate_, logits,
                   s);
  mark("head.small");

  grow(logits_pinned_, static_cast<size_t>(N) * sizeof(float));
  CLEF_CUDA_CHECK(
      cudaMemcpyAsync(logits_pinned_.get(), logits, N * sizeof(float), cudaMemcpyDeviceToHost, s));
  CLEF_CUDA_CHECK(cudaStreamSynchronize(s));
  const float* flat = logits_pinned_.get<float>();
  std::vector<std::vector<float>> out(nq);
  for (int k = 0, j = 0; k < nq; ++k)
    for (size_t o = 0; o < enc.questions[k].option_spans.size(); ++o) out[k].push_back(flat[j++]);
  return out;
}

}  // namespace clef::engine::cuda

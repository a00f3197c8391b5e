#include "engine/cuda/joint_head.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <map>

#include "engine/cuda/gemm/gemm.h"
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

CudaJointHead::CudaJointHead(const model::Release& release, HeadPrecision precision, Gemm& gemm,
                             const __nv_bfloat16* lm_head_bf16,
                             const std::function<void(const std::string&)>& progress)
    : precision_(precision), gemm_(gemm) {
  const model::HeadConfig& c = release.head;
  D_ = c.hidden_size;
  W_ = c.width;
  heads_ = c.heads;
  F_ = c.feedforward;
  if (D_ <= 0 || W_ <= 0 || heads_ <= 0 || W_ % heads_ != 0)
    throw std::runtime_error("joint head: width must be a positive multiple of heads");

  const bool bf16 = precision_ == HeadPrecision::BFloat16;
  auto put = [&](const void* src, size_t bytes) {
    DeviceBuffer b(std::max<size_t>(bytes, 1));
    CLEF_CUDA_CHECK(cudaMemcpy(b.get(), src, bytes, cudaMemcpyHostToDevice));
    w_.storage.push_back(std::move(b));
    return w_.storage.back().get();
  };
  // Every head tensor once, by name; the typed fields below point into these uploads.
  std::map<std::string, HeadMatrix> up;
  std::vector<uint16_t> host_bf16;
  for (const auto& [name, t] : release.head_tensors()) {
    HeadMatrix m;
    const size_t n = t.numel();
    const std::vector<float> host = t.to_float();
    m.f32 = static_cast<const float*>(put(host.data(), n * sizeof(float)));
    // A bf16 copy of every matrix that bf16 holds exactly (all of them under the loading rule):
    // the few-row linears stream it at half the bytes with the same fp32 products. The bf16 mode's
    // T-row GEMM weights get one in any case.
    const bool matrix = t.shape.size() == 2;
    m.matrix = matrix;
    if (matrix) {
      m.rows = static_cast<int>(t.shape[0]);
      m.cols = static_cast<int>(t.shape[1]);
    } else {
      m.rows = static_cast<int>(n);
      m.cols = 1;
    }
    host_bf16.resize(matrix ? n : 0);
    bool exact = matrix;
    for (size_t i = 0; i < host_bf16.size(); ++i) {
      host_bf16[i] = model::float_to_bf16(host[i]);
      exact = exact && (model::bf16_to_float(host_bf16[i]) == host[i] || host[i] != host[i]);
    }
    m.bf16_exact = exact;
    if (exact || (bf16 && is_memory_gemm_weight(name)))
      m.bf16 = static_cast<const __nv_bfloat16*>(put(host_bf16.data(), n * 2));
    up.emplace(name, m);
  }
  auto tensor = [&](const std::string& name) -> const HeadMatrix& {
    auto it = up.find(name);
    if (it == up.end()) throw std::runtime_error("joint head: missing tensor " + name);
    return it->second;
  };
  auto vec = [&](const std::string& name) { return tensor(name).f32; };
  auto norm = [&](const std::string& p) {
    return HeadLayerNorm{vec(p + ".weight"), vec(p + ".bias")};
  };
  // A Linear [N, K]: its weight must be a matrix with K columns.
  auto lin = [&](const std::string& p, int K, bool bias) {
    HeadLinear l;
    l.weight = tensor(p + ".weight");
    if (!l.weight.matrix || l.weight.cols != K)
      throw std::runtime_error("joint head: " + p + ".weight has an unexpected shape");
    if (bias) l.bias = vec(p + ".bias");
    return l;
  };
  auto attention = [&](const std::string& p) {
    HeadAttention a;
    a.in_proj.weight = tensor(p + ".in_proj_weight");
    if (!a.in_proj.weight.matrix || a.in_proj.weight.cols != W_ || a.in_proj.weight.rows != 3 * W_)
      throw std::runtime_error("joint head: " + p + ".in_proj_weight has an unexpected shape");
    a.in_proj.bias = vec(p + ".in_proj_bias");
    a.out_proj = lin(p + ".out_proj", W_, true);
    return a;
  };
  w_.hidden_norm = norm("hidden_norm");
  w_.option_summary_norm = norm("option_summary_norm");
  w_.field_norm = norm("field_norm");
  w_.option_norm = norm("option_norm");
  w_.memory_projection = lin("memory_projection", D_, false);
  w_.option_context_projection = lin("option_context_projection", D_, false);
  w_.option_lexical_projection = lin("option_lexical_projection", D_, false);
  w_.option_question_projection = lin("option_question_projection", D_, false);
  w_.question_projection = lin("question_projection", D_, false);
  w_.global_projection = lin("global_projection", D_, false);
  w_.type_embedding = vec("type_embedding.weight");
  for (int l = 0; l < c.routing_layers; ++l) {
    const std::string p = "evidence_layers." + std::to_string(l) + ".";
    EvidenceLayer e;
    e.memory_norm = norm(p + "memory_norm");
    e.query_norm = norm(p + "query_norm");
    e.feedforward_norm = norm(p + "feedforward_norm");
    e.attention = attention(p + "attention");
    e.feedforward_in = lin(p + "feedforward.0", W_, true);
    e.feedforward_out = lin(p + "feedforward.3", F_, true);
    w_.evidence.push_back(e);
  }
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    DecoderLayer d;
    d.norm1 = norm(p + "norm1");
    d.norm2 = norm(p + "norm2");
    d.norm3 = norm(p + "norm3");
    d.self_attn = attention(p + "self_attn");
    d.cross_attn = attention(p + "multihead_attn");
    d.linear1 = lin(p + "linear1", W_, true);
    d.linear2 = lin(p + "linear2", F_, true);
    w_.layers.push_back(d);
  }
  w_.residual_in = lin("residual_scorer.0", 4 * W_, true);
  w_.residual_out = lin("residual_scorer.3", W_, true);
  auto scalar = [&](const char* name) {
    const model::Tensor& t = release.head_tensor(name);
    if (t.numel() != 1)
      throw std::runtime_error(std::string("joint head: ") + name + " is not a scalar");
    return t.at(0);
  };
  // Clamped in log space first, then exponentiated (as the reference, in fp32).
  const float ln100 = static_cast<float>(std::log(100.0));
  w_.prior_scale = std::exp(std::min(scalar("prior_logit_scale"), ln100));
  w_.joint_scale = std::exp(std::min(scalar("joint_logit_scale"), ln100));
  w_.gate = 1.f / (1.f + std::exp(-scalar("residual_gate")));

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
}

CudaJointHead::~CudaJointHead() = default;

void CudaJointHead::gemm_f32(int M, int N, int K, const float* a, int lda, int64_t a_bs,
                             const float* b, int ldb, int64_t b_bs, bool b_is_nk, float* c, int ldc,
                             int64_t c_bs, int batch, cudaStream_t s) {
  GemmProblem p;
  p.M = M;
  p.N = N;
  p.K = K;
  p.a = {a, DataType::F32, lda, a_bs};
  p.b = {b, DataType::F32, ldb, b_bs};
  p.b_is_nk = b_is_nk;
  p.c = c;
  p.c_dtype = DataType::F32;
  p.ldc = ldc;
  p.c_batch_stride = c_bs;
  p.batch = batch;
  p.tuning = GemmTuning::Heuristic;
  gemm_.run(p, s);
}

void CudaJointHead::linear(const float* x, const __nv_bfloat16* x_bf16, int rows, int K,
                           const HeadLinear& lin, int row_off, int N, float* y, bool accumulate,
                           const float* bias, bool gelu, cudaStream_t s) {
  const HeadMatrix& wt = lin.weight;
  if (wt.cols != K || wt.rows < row_off + N)
    throw std::runtime_error("joint head: a linear layer has an unexpected shape");
  const bool use_bf16 = x_bf16 && wt.bf16;
  const size_t off = static_cast<size_t>(row_off) * K;
  if (!use_bf16 && rows <= kSkinnyMaxRows && wt.bf16_exact) {
    if (!x) throw std::runtime_error("joint head: no fp32 input for a few-row linear");
    hk::skinny_linear(x, rows, K, wt.bf16 + off, N, bias, gelu, accumulate, y, s);
    mark("head.linear_few_rows");
    return;
  }
  if (!use_bf16 && !x) throw std::runtime_error("joint head: no fp32 input for a linear");
  GemmProblem p;
  p.M = rows;
  p.N = N;
  p.K = K;
  if (use_bf16) {
    p.a = {x_bf16, DataType::BF16, K};
    p.b = {wt.bf16 + off, DataType::BF16, K};
  } else {
    p.a = {x, DataType::F32, K};
    p.b = {wt.f32 + off, DataType::F32, K};
  }
  p.b_is_nk = true;
  p.c = y;
  p.c_dtype = DataType::F32;
  p.ldc = N;
  p.accumulate = accumulate;
  p.tuning = GemmTuning::Heuristic;
  gemm_.run(p, s);
  mark(use_bf16 ? "head.gemm_bf16" : "head.gemm");
  hk::bias_act(y, rows, N, bias, gelu, s);
  mark("head.small");
}

void CudaJointHead::layer_norm(const HeadLayerNorm& ln, const float* x, int rows, int n, float* y,
                               __nv_bfloat16* y_bf16, cudaStream_t s) {
  hk::layer_norm(x, rows, n, ln.weight, ln.bias, kLnEps, y, y_bf16, s);
  mark("head.small");
}

void CudaJointHead::mha(const HeadAttention& at, const float* xq, int nq, const float* xkv,
                        const __nv_bfloat16* xkv_bf16, int nk, float* out, AttentionScratch& sc,
                        cudaStream_t s) {
  const int W = W_, hd = W_ / heads_;
  const float* in_b = at.in_proj.bias;
  float* q = scratch<float>(sc.q, static_cast<size_t>(nq) * W);
  float* kv = scratch<float>(sc.kv, static_cast<size_t>(nk) * 2 * W);
  float* scores = scratch<float>(sc.scores, static_cast<size_t>(heads_) * nq * nk);
  float* att = scratch<float>(sc.att, static_cast<size_t>(nq) * W);
  linear(xq, nullptr, nq, W, at.in_proj, 0, W, q, false, in_b, false, s);
  linear(xkv, xkv_bf16, nk, W, at.in_proj, W, 2 * W, kv, false, in_b + W, false, s);
  // Per head: scores = q_h k_h^T / sqrt(hd) -> softmax -> att_h = P v_h (batched over heads).
  gemm_f32(nq, nk, hd, q, W, hd, kv, 2 * W, hd, true, scores, nk, static_cast<int64_t>(nq) * nk,
           heads_, s);
  mark("head.gemm");
  hk::softmax_rows(scores, heads_ * nq, nk, 1.f / std::sqrt(static_cast<float>(hd)), s);
  mark("head.small");
  gemm_f32(nq, hd, nk, scores, nk, static_cast<int64_t>(nq) * nk, kv + W, 2 * W, hd, false, att, W,
           hd, heads_, s);
  mark("head.gemm");
  linear(att, nullptr, nq, W, at.out_proj, 0, W, out, true, at.out_proj.bias, false, s);
}

// Span table (host, validated): question spans, option spans, option owners, first option per
// question, question types, then the input ids.
CudaJointHead::Staged CudaJointHead::stage(const encoding::EncodedRequest& enc,
                                           std::vector<int32_t>& table) const {
  const int T = static_cast<int>(enc.input_ids.size());
  if (T <= 0) throw std::runtime_error("joint head: empty input");
  if (enc.questions.empty()) throw std::runtime_error("joint head: no questions");
  Staged st;
  st.enc = &enc;
  st.T = T;
  st.nq = static_cast<int>(enc.questions.size());
  for (const auto& q : enc.questions) {
    if (q.option_spans.empty())
      throw std::runtime_error("joint head: question " + q.id + " has no options");
    st.N += static_cast<int>(q.option_spans.size());
    st.max_opts = std::max(st.max_opts, static_cast<int>(q.option_spans.size()));
  }
  const int nq = st.nq;
  st.table_off = table.size();
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
  st.off_owner = table.size() - st.table_off;
  for (int k = 0; k < nq; ++k)
    for (size_t j = 0; j < enc.questions[k].option_spans.size(); ++j) table.push_back(k);
  st.off_first = table.size() - st.table_off;
  for (int k = 0, j = 0; k <= nq; ++k) {
    table.push_back(j);
    if (k < nq) j += static_cast<int>(enc.questions[k].option_spans.size());
  }
  st.off_types = table.size() - st.table_off;
  for (const auto& q : enc.questions) {
    const int t = static_cast<int>(q.type);
    if (t < 0 || t > 2) throw std::runtime_error("joint head: unknown question type");
    table.push_back(t);
  }
  st.off_ids = table.size() - st.table_off;
  for (int32_t id : enc.input_ids) {
    if (id < 0 || id >= vocab_) throw std::runtime_error("joint head: token id outside lm_head");
    table.push_back(id);
  }
  st.table_len = table.size() - st.table_off;
  return st;
}

void CudaJointHead::begin(const std::vector<const encoding::EncodedRequest*>& batch,
                          cudaStream_t s) {
  // An earlier batch abandoned before finish() may still read the pinned staging.
  if (!staged_.empty()) CLEF_CUDA_CHECK(cudaStreamSynchronize(s));
  staged_.clear();
  enqueued_ = 0;
  std::vector<int32_t> table;
  std::vector<Staged> st;
  size_t longest = 0, logits = 0;
  for (const auto* enc : batch) {
    if (!enc) throw std::runtime_error("joint head: null request");
    st.push_back(stage(*enc, table));
    st.back().logits_off = logits;
    logits += static_cast<size_t>(st.back().N);
    longest = std::max(longest, st.back().table_len);
  }
  // The previous batch synchronised the stream, so the pinned staging is free to reuse; each
  // request has its own region, so no upload or download of this batch overwrites another's.
  grow(table_pinned_, table.size() * sizeof(int32_t));
  std::copy(table.begin(), table.end(), table_pinned_.get<int32_t>());
  grow(host_table_dev_, longest * sizeof(int32_t));
  grow(logits_pinned_, std::max<size_t>(logits, 1) * sizeof(float));
  staged_ = std::move(st);
}

void CudaJointHead::reserve_batch(size_t tokens) {
  grow(table_pinned_, 6 * tokens * sizeof(int32_t));
  grow(logits_pinned_, std::max<size_t>(tokens, 1) * sizeof(float));
}

std::vector<std::vector<std::vector<float>>> CudaJointHead::finish(cudaStream_t s) {
  if (enqueued_ != staged_.size())
    throw std::runtime_error("joint head: finish() before every request was enqueued");
  CLEF_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<std::vector<std::vector<float>>> out;
  out.reserve(staged_.size());
  for (const Staged& st : staged_) {
    const float* flat = logits_pinned_.get<float>() + st.logits_off;
    std::vector<std::vector<float>> r(st.nq);
    for (int k = 0, j = 0; k < st.nq; ++k)
      for (size_t o = 0; o < st.enc->questions[k].option_spans.size(); ++o)
        r[k].push_back(flat[j++]);
    out.push_back(std::move(r));
  }
  staged_.clear();
  enqueued_ = 0;
  return out;
}

std::vector<std::vector<float>> CudaJointHead::run(const void* hidden, int T,
                                                   const encoding::EncodedRequest& enc,
                                                   cudaStream_t s,
                                                   std::function<void(const char*)> marks) {
  if (T <= 0 || static_cast<size_t>(T) != enc.input_ids.size())
    throw std::runtime_error("joint head: hidden states do not match the encoded input");
  begin({&enc}, s);
  enqueue(hidden, s, std::move(marks));
  return finish(s).at(0);
}

void CudaJointHead::enqueue(const void* hidden, cudaStream_t s,
                            std::function<void(const char*)> marks) {
  if (enqueued_ >= staged_.size())
    throw std::runtime_error("joint head: more requests enqueued than begin() staged");
  struct Reset {  // marks live for this call only
    std::function<void(const char*)>& m;
    ~Reset() { m = nullptr; }
  } reset{mark_};
  mark_ = std::move(marks);
  const Staged& st = staged_[enqueued_];
  const int D = D_, W = W_;
  const bool bf16 = precision_ == HeadPrecision::BFloat16;
  const int T = st.T, nq = st.nq, N = st.N, max_opts = st.max_opts;
  int32_t* dt = host_table_dev_.get<int32_t>();
  CLEF_CUDA_CHECK(cudaMemcpyAsync(dt, table_pinned_.get<int32_t>() + st.table_off,
                                  st.table_len * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  const int32_t* q_spans = dt;
  const int32_t* o_spans = dt + 2 * nq;
  const int32_t* owner = dt + st.off_owner;
  const int32_t* first = dt + st.off_first;
  const int32_t* types = dt + st.off_types;
  const int32_t* ids = dt + st.off_ids;

  // S = hidden_norm(X); M = memory_projection(S).
  Scratch& b = scratch_;
  float* S = scratch<float>(b.S, static_cast<size_t>(T) * D);
  __nv_bfloat16* S16 = bf16 ? scratch<__nv_bfloat16>(b.S16, static_cast<size_t>(T) * D) : nullptr;
  if (bf16)
    hk::layer_norm(static_cast<const __nv_bfloat16*>(hidden), T, D, w_.hidden_norm.weight,
                   w_.hidden_norm.bias, kLnEps, S, S16, s);
  else
    hk::layer_norm(static_cast<const float*>(hidden), T, D, w_.hidden_norm.weight,
                   w_.hidden_norm.bias, kLnEps, S, nullptr, s);
  mark("head.small");
  float* M = scratch<float>(b.M, static_cast<size_t>(T) * W);
  linear(S, S16, T, D, w_.memory_projection, 0, W, M, false, nullptr, false, s);
  __nv_bfloat16* M16 = nullptr;
  if (bf16) {
    M16 = scratch<__nv_bfloat16>(b.M16, static_cast<size_t>(T) * W);
    hk::to_bf16(M, M16, static_cast<size_t>(T) * W, s);
    mark("head.small");
  }
  const float* g = S + static_cast<size_t>(T - 1) * D;

  // Span means in D space and the option queries O [N, W].
  float* Qm = scratch<float>(b.Qm, static_cast<size_t>(nq) * D);
  float* Cm = scratch<float>(b.Cm, static_cast<size_t>(N) * D);
  float* Lm = scratch<float>(b.Lm, static_cast<size_t>(N) * D);
  hk::span_mean(S, D, q_spans, nq, Qm, s);
  mark("head.small");
  hk::span_mean(S, D, o_spans, N, Cm, s);
  mark("head.small");
  if (lm_head_is_bf16_)
    hk::lexical_mean(static_cast<const __nv_bfloat16*>(lm_head_), D, ids, o_spans, N, Lm, s);
  else
    hk::lexical_mean(static_cast<const float*>(lm_head_), D, ids, o_spans, N, Lm, s);
  mark("head.small");
  float* O = scratch<float>(b.O, static_cast<size_t>(N) * W);
  float* oq = scratch<float>(b.oq, static_cast<size_t>(nq) * W);
  linear(Cm, nullptr, N, D, w_.option_context_projection, 0, W, O, false, nullptr, false, s);
  linear(Lm, nullptr, N, D, w_.option_lexical_projection, 0, W, O, true, nullptr, false, s);
  linear(Qm, nullptr, nq, D, w_.option_question_projection, 0, W, oq, false, nullptr, false, s);
  hk::add_rows_gathered(O, oq, owner, N, W, s);
  mark("head.small");

  // Evidence layers: options attend to the normalised memory.
  float* qn = scratch<float>(b.qn, static_cast<size_t>(N) * W);
  float* mem = bf16 ? nullptr : scratch<float>(b.mem, static_cast<size_t>(T) * W);
  __nv_bfloat16* mem16 =
      bf16 ? scratch<__nv_bfloat16>(b.mem16, static_cast<size_t>(T) * W) : nullptr;
  float* ffh = scratch<float>(b.ffh, static_cast<size_t>(std::max(N, nq)) * F_);
  for (const EvidenceLayer& L : w_.evidence) {
    layer_norm(L.memory_norm, M, T, W, mem, mem16, s);
    layer_norm(L.query_norm, O, N, W, qn, nullptr, s);
    mha(L.attention, qn, N, mem, mem16, T, O, b.evidence, s);
    layer_norm(L.feedforward_norm, O, N, W, qn, nullptr, s);
    linear(qn, nullptr, N, W, L.feedforward_in, 0, F_, ffh, false, L.feedforward_in.bias, true, s);
    linear(ffh, nullptr, N, F_, L.feedforward_out, 0, W, O, true, L.feedforward_out.bias, false, s);
  }

  // Fields: question projection + option summary + global token + type embedding.
  float* f0 = scratch<float>(b.f0, static_cast<size_t>(nq) * W);
  float* summ = scratch<float>(b.summ, static_cast<size_t>(nq) * W);
  float* sn = scratch<float>(b.sn, static_cast<size_t>(nq) * W);
  float* gp = scratch<float>(b.gp, W);
  float* Fb = scratch<float>(b.F, static_cast<size_t>(nq) * W);
  linear(Qm, nullptr, nq, D, w_.question_projection, 0, W, f0, false, nullptr, false, s);
  hk::option_summary(O, f0, first, nq, W, max_opts, summ, s);
  mark("head.small");
  layer_norm(w_.option_summary_norm, summ, nq, W, sn, nullptr, s);
  linear(g, nullptr, 1, D, w_.global_projection, 0, W, gp, false, nullptr, false, s);
  hk::field_init(f0, sn, gp, w_.type_embedding, types, nq, W, Fb, s);
  mark("head.small");

  // Decoder layers (norm_first TransformerDecoderLayer; cross-attention to the raw memory M).
  float* n1 = scratch<float>(b.n1, static_cast<size_t>(nq) * W);
  for (const DecoderLayer& L : w_.layers) {
    layer_norm(L.norm1, Fb, nq, W, n1, nullptr, s);
    mha(L.self_attn, n1, nq, n1, nullptr, nq, Fb, b.self, s);
    layer_norm(L.norm2, Fb, nq, W, n1, nullptr, s);
    mha(L.cross_attn, n1, nq, M, M16, T, Fb, b.cross, s);
    layer_norm(L.norm3, Fb, nq, W, n1, nullptr, s);
    linear(n1, nullptr, nq, W, L.linear1, 0, F_, ffh, false, L.linear1.bias, true, s);
    linear(ffh, nullptr, nq, F_, L.linear2, 0, W, Fb, true, L.linear2.bias, false, s);
  }
  float* Fn = scratch<float>(b.Fn, static_cast<size_t>(nq) * W);
  float* U = scratch<float>(b.U, static_cast<size_t>(N) * W);
  layer_norm(w_.field_norm, Fb, nq, W, Fn, nullptr, s);
  layer_norm(w_.option_norm, O, N, W, U, nullptr, s);

  // Scoring.
  float* feat = scratch<float>(b.feat, static_cast<size_t>(N) * 4 * W);
  float* rh = scratch<float>(b.rh, static_cast<size_t>(N) * W);
  float* res = scratch<float>(b.res, N);
  float* logits = scratch<float>(b.logits, N);
  hk::scorer_features(Fn, U, owner, N, W, feat, s);
  mark("head.small");
  linear(feat, nullptr, N, 4 * W, w_.residual_in, 0, W, rh, false, w_.residual_in.bias, true, s);
  linear(rh, nullptr, N, W, w_.residual_out, 0, 1, res, false, w_.residual_out.bias, false, s);
  hk::final_logits(Lm, Qm, g, Fn, U, res, owner, N, D, W, w_.prior_scale, w_.joint_scale, w_.gate,
                   logits, s);
  mark("head.small");

  CLEF_CUDA_CHECK(cudaMemcpyAsync(logits_pinned_.get<float>() + st.logits_off, logits,
                                  N * sizeof(float), cudaMemcpyDeviceToHost, s));
  ++enqueued_;
}

}  // namespace clef::engine::cuda

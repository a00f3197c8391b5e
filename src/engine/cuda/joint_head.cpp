#include "engine/cuda/joint_head.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <map>

#include "engine/cuda/gemm/gemm.h"
#include "engine/cuda/head_attention.h"
#include "engine/cuda/head_kernels.h"
#include "model/bf16.h"

namespace clef::engine::cuda {
namespace {

constexpr float kLnEps = 1e-5f;  // every head LayerNorm (PyTorch default)
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

void CudaJointHead::linear(const float* x, const __nv_bfloat16* x_bf16, int rows, int K,
                           const HeadLinear& lin, int row_off, int N, float* y, bool accumulate,
                           const float* bias, bool gelu, bool few, cudaStream_t s) {
  const HeadMatrix& wt = lin.weight;
  if (wt.cols != K || wt.rows < row_off + N)
    throw std::runtime_error("joint head: a linear layer has an unexpected shape");
  const bool use_bf16 = x_bf16 && wt.bf16;
  const size_t off = static_cast<size_t>(row_off) * K;
  if (!use_bf16 && few && wt.bf16_exact) {
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
  // The bias in the epilogue (the memory keys/values: one pass over [T, 2W] fewer).
  const bool fuse_bias =
      bias && !gelu && !accumulate && reinterpret_cast<uintptr_t>(bias) % 16 == 0;
  if (fuse_bias) p.bias = bias;
  gemm_.run(p, s);
  mark(use_bf16 ? "head.gemm_bf16" : "head.gemm");
  if (fuse_bias) return;
  hk::bias_act(y, rows, N, bias, gelu, s);
  mark("head.small");
}

void CudaJointHead::layer_norm(const HeadLayerNorm& ln, const float* x, int rows, int n, float* y,
                               __nv_bfloat16* y_bf16, cudaStream_t s) {
  hk::layer_norm(x, rows, n, ln.weight, ln.bias, kLnEps, y, y_bf16, s);
  mark("head.small");
}

void CudaJointHead::mha(const HeadAttention& at, const float* xq, int nq, const float* xkv,
                        const __nv_bfloat16* xkv_bf16, int nk, bool kv_few, const Group::Plan& plan,
                        const int32_t* table, float* out, cudaStream_t s) {
  const int W = W_, hd = W_ / heads_;
  const float* in_b = at.in_proj.bias;
  Scratch& b = scratch_;
  float* q = b.att_q.get<float>();
  float* kv = b.att_kv.get<float>();
  float* att = b.att_out.get<float>();
  linear(xq, nullptr, nq, W, at.in_proj, 0, W, q, false, in_b, false, true, s);
  linear(xkv, xkv_bf16, nk, W, at.in_proj, W, 2 * W, kv, false, in_b + W, false, kv_few, s);
  const HeadAttnTables t{table + plan.items, table + plan.combine, plan.item_count,
                         plan.query_count, plan.parts};
  head_attention(q, W, kv, kv + W, 2 * W, heads_, hd, 1.f / std::sqrt(static_cast<float>(hd)), t,
                 b.att_ml.get<float>(), b.att_acc.get<float>(), att, W, s);
  mark("head.attention");
  linear(att, nullptr, nq, W, at.out_proj, 0, W, out, true, at.out_proj.bias, false, true, s);
}

// A group's table parts while begin() builds them (numbers within the group).
struct CudaJointHead::GroupBuild {
  std::vector<int32_t> q_spans, o_spans, owner, first{0}, types, q_req, g_spans, ids;
  std::vector<int> rows, nq, N, row0, q0;  // per request
  int total_rows = 0, total_q = 0, total_N = 0, max_opts = 0;
};

void CudaJointHead::check(const encoding::EncodedRequest& enc) const {
  const int T = static_cast<int>(enc.input_ids.size());
  if (T <= 0) throw std::runtime_error("joint head: empty input");
  if (enc.questions.empty()) throw std::runtime_error("joint head: no questions");
  for (const auto& q : enc.questions) {
    if (q.option_spans.empty())
      throw std::runtime_error("joint head: question " + q.id + " has no options");
    check_span(q.question_span, T, "question " + q.id);
    for (const auto& sp : q.option_spans) check_span(sp, T, "option of question " + q.id);
    const int t = static_cast<int>(q.type);
    if (t < 0 || t > 2) throw std::runtime_error("joint head: unknown question type");
  }
  for (int32_t id : enc.input_ids)
    if (id < 0 || id >= vocab_) throw std::runtime_error("joint head: token id outside lm_head");
}

void CudaJointHead::stage(const encoding::EncodedRequest& enc, GroupBuild& g) const {
  check(enc);
  const int T = static_cast<int>(enc.input_ids.size());
  const int r = static_cast<int>(g.rows.size()), row0 = g.total_rows, q0 = g.total_q;
  int N = 0;
  for (const auto& q : enc.questions) {
    N += static_cast<int>(q.option_spans.size());
    g.max_opts = std::max(g.max_opts, static_cast<int>(q.option_spans.size()));
  }
  int k = q0;
  for (const auto& q : enc.questions) {
    g.q_spans.insert(g.q_spans.end(), {row0 + q.question_span.start, row0 + q.question_span.end});
    for (const auto& sp : q.option_spans) {
      g.o_spans.insert(g.o_spans.end(), {row0 + sp.start, row0 + sp.end});
      g.owner.push_back(k);
    }
    g.first.push_back(g.first.back() + static_cast<int>(q.option_spans.size()));
    g.types.push_back(static_cast<int>(q.type));
    g.q_req.push_back(r);
    ++k;
  }
  g.g_spans.insert(g.g_spans.end(), {row0 + T - 1, row0 + T});
  g.ids.insert(g.ids.end(), enc.input_ids.begin(), enc.input_ids.end());
  g.rows.push_back(T);
  g.nq.push_back(static_cast<int>(enc.questions.size()));
  g.N.push_back(N);
  g.row0.push_back(row0);
  g.q0.push_back(q0);
  g.total_rows += T;
  g.total_q += static_cast<int>(enc.questions.size());
  g.total_N += N;
}

void CudaJointHead::begin(const std::vector<const encoding::EncodedRequest*>& batch, cudaStream_t s,
                          const std::vector<int>& group_sizes) {
  // An earlier batch abandoned before finish() may still read the pinned staging.
  if (!staged_.empty()) CLEF_CUDA_CHECK(cudaStreamSynchronize(s));
  staged_.clear();
  groups_.clear();
  enqueued_ = 0;
  std::vector<int> sizes = group_sizes;
  if (sizes.empty()) sizes.assign(batch.size(), 1);
  size_t in_groups = 0;
  for (int n : sizes) {
    if (n <= 0) throw std::runtime_error("joint head: an empty group");
    in_groups += static_cast<size_t>(n);
  }
  if (in_groups != batch.size())
    throw std::runtime_error("joint head: the groups do not cover the batch");
  std::vector<int32_t> table;
  std::vector<Staged> st;
  std::vector<Group> groups;
  size_t longest = 0, logits = 0, next = 0;
  for (int n : sizes) {
    GroupBuild b;
    Group gr;
    gr.logits_off = logits;
    for (int j = 0; j < n; ++j, ++next) {
      const auto* enc = batch[next];
      if (!enc) throw std::runtime_error("joint head: null request");
      stage(*enc, b);
      st.push_back({enc, logits});
      logits += static_cast<size_t>(b.N.back());
    }
    gr.table_off = table.size();
    auto put = [&](const std::vector<int32_t>& v) {
      const size_t at = table.size() - gr.table_off;
      table.insert(table.end(), v.begin(), v.end());
      return at;
    };
    gr.q_spans = put(b.q_spans);
    gr.o_spans = put(b.o_spans);
    gr.owner = put(b.owner);
    gr.first_opt = put(b.first);
    gr.types = put(b.types);
    gr.q_req = put(b.q_req);
    gr.g_spans = put(b.g_spans);
    gr.ids = put(b.ids);
    auto plan = [&](const std::vector<int>& queries, const std::vector<int>& key0,
                    const std::vector<int>& keys, Group::Plan& out) {
      const HeadAttnPlan p = plan_head_attention(queries, key0, keys);
      out.items = put(p.items);
      out.combine = put(p.combine);
      out.item_count = p.item_count();
      out.query_count = p.query_count();
      out.parts = p.parts;
    };
    plan(b.N, b.row0, b.rows, gr.evidence);  // options over their request's memory rows
    plan(b.nq, b.row0, b.rows, gr.cross);    // questions over their request's memory rows
    plan(b.nq, b.q0, b.nq, gr.self);         // questions over their request's questions
    gr.table_len = table.size() - gr.table_off;
    gr.n = {b.total_rows, n,          b.total_q,
            b.total_N,    b.max_opts, std::max({gr.evidence.parts, gr.cross.parts, gr.self.parts})};
    longest = std::max(longest, gr.table_len);
    groups.push_back(gr);
  }
  // The previous batch synchronised the stream, so the pinned staging is free to reuse; each
  // group has its own region, so no upload or download of this batch overwrites another's.
  grow(table_pinned_, table.size() * sizeof(int32_t));
  std::copy(table.begin(), table.end(), table_pinned_.get<int32_t>());
  grow(host_table_dev_, longest * sizeof(int32_t));
  grow(logits_pinned_, std::max<size_t>(logits, 1) * sizeof(float));
  staged_ = std::move(st);
  groups_ = std::move(groups);
}

void CudaJointHead::size_scratch(const GroupSizes& n) {
  const size_t T = static_cast<size_t>(std::max(n.rows, 1)), D = D_, W = W_;
  const size_t nq = std::max(n.nq, 1), N = std::max(n.N, 1), B = std::max(n.requests, 1);
  const bool bf16 = precision_ == HeadPrecision::BFloat16;
  Scratch& b = scratch_;
  scratch<float>(b.S, T * D);
  if (bf16) {
    scratch<__nv_bfloat16>(b.S16, T * D);
    scratch<__nv_bfloat16>(b.M16, T * W);
    scratch<__nv_bfloat16>(b.mem16, T * W);
  } else {
    scratch<float>(b.mem, T * W);
  }
  scratch<float>(b.M, T * W);
  scratch<float>(b.Qm, nq * D);
  scratch<float>(b.Cm, N * D);
  scratch<float>(b.Lm, N * D);
  scratch<float>(b.G, B * D);
  scratch<float>(b.O, N * W);
  scratch<float>(b.oq, nq * W);
  scratch<float>(b.qn, N * W);
  scratch<float>(b.ffh, std::max(N, nq) * F_);
  scratch<float>(b.f0, nq * W);
  scratch<float>(b.summ, nq * W);
  scratch<float>(b.sn, nq * W);
  scratch<float>(b.gp, B * W);
  scratch<float>(b.F, nq * W);
  scratch<float>(b.n1, nq * W);
  scratch<float>(b.Fn, nq * W);
  scratch<float>(b.U, N * W);
  scratch<float>(b.feat, N * 4 * W);
  scratch<float>(b.rh, N * W);
  scratch<float>(b.res, N);
  scratch<float>(b.logits, N);
  const size_t parts = std::max(n.parts, 1), hd = W / heads_;
  scratch<float>(b.att_q, std::max(N, nq) * W);
  scratch<float>(b.att_kv, std::max(T, nq) * 2 * W);
  scratch<float>(b.att_out, std::max(N, nq) * W);
  scratch<float>(b.att_ml, 2 * parts * heads_);
  scratch<float>(b.att_acc, parts * heads_ * hd);
}

void CudaJointHead::reserve_batch(size_t tokens, int max_questions, int max_options,
                                  int max_requests) {
  const size_t B = static_cast<size_t>(std::max(max_requests, 1));
  // A group's questions and options: within each request's limits and (encoded requests) its
  // tokens.
  const size_t nq = std::max<size_t>(max_questions, std::min(B * max_questions, tokens));
  const size_t N = std::max<size_t>(max_options, std::min(B * max_options, tokens));
  const size_t parts = head_attention_parts_bound(std::max(nq, N), B);
  GroupSizes n;
  n.rows = static_cast<int>(tokens);
  n.requests = static_cast<int>(B);
  n.nq = static_cast<int>(nq);
  n.N = static_cast<int>(N);
  n.parts = static_cast<int>(parts);
  size_scratch(n);
  // The table: spans, owners, types and ids, then three plans (an item holds >= 1 part).
  const size_t ints = 5 * nq + 1 + 3 * N + 2 * B + tokens + 3 * (5 * parts) + 3 * (nq + N + nq);
  grow(table_pinned_, ints * sizeof(int32_t));
  grow(host_table_dev_, ints * sizeof(int32_t));
  grow(logits_pinned_, std::max<size_t>(N, 1) * sizeof(float));
}

std::vector<std::vector<std::vector<float>>> CudaJointHead::finish(cudaStream_t s) {
  if (enqueued_ != groups_.size())
    throw std::runtime_error("joint head: finish() before every request was enqueued");
  CLEF_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<std::vector<std::vector<float>>> out;
  out.reserve(staged_.size());
  for (const Staged& st : staged_) {
    const float* flat = logits_pinned_.get<float>() + st.logits_off;
    std::vector<std::vector<float>> r(st.enc->questions.size());
    for (size_t k = 0, j = 0; k < r.size(); ++k)
      for (size_t o = 0; o < st.enc->questions[k].option_spans.size(); ++o)
        r[k].push_back(flat[j++]);
    out.push_back(std::move(r));
  }
  staged_.clear();
  groups_.clear();
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
                            std::function<void(const char*)> marks, cudaEvent_t hidden_read) {
  if (enqueued_ >= groups_.size())
    throw std::runtime_error("joint head: more groups enqueued than begin() staged");
  struct Reset {  // marks live for this call only
    std::function<void(const char*)>& m;
    ~Reset() { m = nullptr; }
  } reset{mark_};
  mark_ = std::move(marks);
  const Group& gr = groups_[enqueued_];
  const int D = D_, W = W_;
  const bool bf16 = precision_ == HeadPrecision::BFloat16;
  const int T = gr.n.rows, nq = gr.n.nq, N = gr.n.N, B = gr.n.requests;
  size_scratch(gr.n);
  int32_t* dt = host_table_dev_.get<int32_t>();
  CLEF_CUDA_CHECK(cudaMemcpyAsync(dt, table_pinned_.get<int32_t>() + gr.table_off,
                                  gr.table_len * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  const int32_t* q_spans = dt + gr.q_spans;
  const int32_t* o_spans = dt + gr.o_spans;
  const int32_t* owner = dt + gr.owner;
  const int32_t* first = dt + gr.first_opt;
  const int32_t* types = dt + gr.types;
  const int32_t* q_req = dt + gr.q_req;
  const int32_t* g_spans = dt + gr.g_spans;
  const int32_t* ids = dt + gr.ids;

  // S = hidden_norm(X); M = memory_projection(S), over every row of the group.
  Scratch& b = scratch_;
  float* S = b.S.get<float>();
  __nv_bfloat16* S16 = bf16 ? b.S16.get<__nv_bfloat16>() : nullptr;
  if (bf16)
    hk::layer_norm(static_cast<const __nv_bfloat16*>(hidden), T, D, w_.hidden_norm.weight,
                   w_.hidden_norm.bias, kLnEps, S, S16, s);
  else
    hk::layer_norm(static_cast<const float*>(hidden), T, D, w_.hidden_norm.weight,
                   w_.hidden_norm.bias, kLnEps, S, nullptr, s);
  // Nothing below reads `hidden` (S and S16 hold its normalised rows).
  if (hidden_read) CLEF_CUDA_CHECK(cudaEventRecord(hidden_read, s));
  mark("head.small");
  float* M = b.M.get<float>();
  linear(S, S16, T, D, w_.memory_projection, 0, W, M, false, nullptr, false, false, s);
  __nv_bfloat16* M16 = nullptr;
  if (bf16) {
    M16 = b.M16.get<__nv_bfloat16>();
    hk::to_bf16(M, M16, static_cast<size_t>(T) * W, s);
    mark("head.small");
  }

  // Span means in D space (and each request's last row g), the option queries O [N, W].
  float* Qm = b.Qm.get<float>();
  float* Cm = b.Cm.get<float>();
  float* Lm = b.Lm.get<float>();
  float* G = b.G.get<float>();
  hk::span_mean(S, D, q_spans, nq, Qm, s);
  mark("head.small");
  hk::span_mean(S, D, o_spans, N, Cm, s);
  mark("head.small");
  hk::span_mean(S, D, g_spans, B, G, s);  // a one-row mean is the row itself
  mark("head.small");
  if (lm_head_is_bf16_)
    hk::lexical_mean(static_cast<const __nv_bfloat16*>(lm_head_), D, ids, o_spans, N, Lm, s);
  else
    hk::lexical_mean(static_cast<const float*>(lm_head_), D, ids, o_spans, N, Lm, s);
  mark("head.small");
  float* O = b.O.get<float>();
  float* oq = b.oq.get<float>();
  linear(Cm, nullptr, N, D, w_.option_context_projection, 0, W, O, false, nullptr, false, true, s);
  linear(Lm, nullptr, N, D, w_.option_lexical_projection, 0, W, O, true, nullptr, false, true, s);
  linear(Qm, nullptr, nq, D, w_.option_question_projection, 0, W, oq, false, nullptr, false, true,
         s);
  hk::add_rows_gathered(O, oq, owner, N, W, s);
  mark("head.small");

  // Evidence layers: options attend to their request's normalised memory.
  float* qn = b.qn.get<float>();
  float* mem = bf16 ? nullptr : b.mem.get<float>();
  __nv_bfloat16* mem16 = bf16 ? b.mem16.get<__nv_bfloat16>() : nullptr;
  float* ffh = b.ffh.get<float>();
  for (const EvidenceLayer& L : w_.evidence) {
    layer_norm(L.memory_norm, M, T, W, mem, mem16, s);
    layer_norm(L.query_norm, O, N, W, qn, nullptr, s);
    mha(L.attention, qn, N, mem, mem16, T, false, gr.evidence, dt, O, s);
    layer_norm(L.feedforward_norm, O, N, W, qn, nullptr, s);
    linear(qn, nullptr, N, W, L.feedforward_in, 0, F_, ffh, false, L.feedforward_in.bias, true,
           true, s);
    linear(ffh, nullptr, N, F_, L.feedforward_out, 0, W, O, true, L.feedforward_out.bias, false,
           true, s);
  }

  // Fields: question projection + option summary + global token + type embedding.
  float* f0 = b.f0.get<float>();
  float* summ = b.summ.get<float>();
  float* sn = b.sn.get<float>();
  float* gp = b.gp.get<float>();
  float* Fb = b.F.get<float>();
  linear(Qm, nullptr, nq, D, w_.question_projection, 0, W, f0, false, nullptr, false, true, s);
  hk::option_summary(O, f0, first, nq, W, gr.n.max_opts, summ, s);
  mark("head.small");
  layer_norm(w_.option_summary_norm, summ, nq, W, sn, nullptr, s);
  linear(G, nullptr, B, D, w_.global_projection, 0, W, gp, false, nullptr, false, true, s);
  hk::field_init(f0, sn, gp, q_req, w_.type_embedding, types, nq, W, Fb, s);
  mark("head.small");

  // Decoder layers (norm_first TransformerDecoderLayer; cross-attention to the raw memory M);
  // each request's questions attend to each other and to their own memory.
  float* n1 = b.n1.get<float>();
  for (const DecoderLayer& L : w_.layers) {
    layer_norm(L.norm1, Fb, nq, W, n1, nullptr, s);
    mha(L.self_attn, n1, nq, n1, nullptr, nq, true, gr.self, dt, Fb, s);
    layer_norm(L.norm2, Fb, nq, W, n1, nullptr, s);
    mha(L.cross_attn, n1, nq, M, M16, T, false, gr.cross, dt, Fb, s);
    layer_norm(L.norm3, Fb, nq, W, n1, nullptr, s);
    linear(n1, nullptr, nq, W, L.linear1, 0, F_, ffh, false, L.linear1.bias, true, true, s);
    linear(ffh, nullptr, nq, F_, L.linear2, 0, W, Fb, true, L.linear2.bias, false, true, s);
  }
  float* Fn = b.Fn.get<float>();
  float* U = b.U.get<float>();
  layer_norm(w_.field_norm, Fb, nq, W, Fn, nullptr, s);
  layer_norm(w_.option_norm, O, N, W, U, nullptr, s);

  // Scoring.
  float* feat = b.feat.get<float>();
  float* rh = b.rh.get<float>();
  float* res = b.res.get<float>();
  float* logits = b.logits.get<float>();
  hk::scorer_features(Fn, U, owner, N, W, feat, s);
  mark("head.small");
  linear(feat, nullptr, N, 4 * W, w_.residual_in, 0, W, rh, false, w_.residual_in.bias, true, true,
         s);
  linear(rh, nullptr, N, W, w_.residual_out, 0, 1, res, false, w_.residual_out.bias, false, true,
         s);
  hk::final_logits(Lm, Qm, G, q_req, Fn, U, res, owner, N, D, W, w_.prior_scale, w_.joint_scale,
                   w_.gate, logits, s);
  mark("head.small");

  CLEF_CUDA_CHECK(cudaMemcpyAsync(logits_pinned_.get<float>() + gr.logits_off, logits,
                                  N * sizeof(float), cudaMemcpyDeviceToHost, s));
  ++enqueued_;
}

}  // namespace clef::engine::cuda

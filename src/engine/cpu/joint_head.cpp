#include "engine/cpu/joint_head.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/cpu/linear.h"
#include "engine/cpu/ops.h"

namespace clef::engine::cpu {

namespace {

constexpr float kLnEps = 1e-5f;  // every head LayerNorm (PyTorch default)

class Head {
 public:
  Head(const model::Release& r) : r_(r), W_(r.head.width), heads_(r.head.heads) {
    if (W_ <= 0 || heads_ <= 0 || W_ % heads_ != 0)
      throw std::runtime_error("joint head: width must be a positive multiple of heads");
  }

  std::vector<float> vec(const std::string& name) const { return to_f32(r_.head_tensor(name)); }

  // LayerNorm `name` (weight + bias) over rows of n.
  std::vector<float> norm(const std::string& name, const float* x, int rows, int n) const {
    const std::vector<float> w = vec(name + ".weight"), b = vec(name + ".bias");
    std::vector<float> y(static_cast<size_t>(rows) * n);
    layer_norm(x, w.data(), b.data(), kLnEps, rows, n, y.data());
    return y;
  }

  std::vector<float> lin(const std::string& name, const float* x, int rows, bool bias) const {
    const std::vector<float> b = bias ? vec(name + ".bias") : std::vector<float>();
    return linear(r_.head_tensor(name + ".weight"), x, rows, bias ? b.data() : nullptr);
  }

  // PyTorch MultiheadAttention (fused in_proj q|k|v with bias, out_proj with bias, no mask).
  std::vector<float> mha(const std::string& name, const float* xq, int nq, const float* xkv,
                         int nk) const {
    const int W = W_, hd = W_ / heads_;
    const model::Tensor& in_w = r_.head_tensor(name + ".in_proj_weight");
    const std::vector<float> in_b = vec(name + ".in_proj_bias");
    std::vector<float> q(static_cast<size_t>(nq) * W), k(static_cast<size_t>(nk) * W), v(k.size());
    linear(in_w, xq, nq, W, q.data(), W, in_b.data(), 0, W);
    linear(in_w, xkv, nk, W, k.data(), W, in_b.data() + W, W, W);
    linear(in_w, xkv, nk, W, v.data(), W, in_b.data() + 2 * W, 2 * W, W);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    constexpr int kBlock = 256;
    std::vector<float> att(q.size());
    std::vector<float> scores(static_cast<size_t>(std::min(nq, kBlock)) * nk);
    for (int h = 0; h < heads_; ++h) {
      for (int r0 = 0; r0 < nq; r0 += kBlock) {
        const int nb = std::min(kBlock, nq - r0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, nk, hd, scale,
                    q.data() + static_cast<size_t>(r0) * W + h * hd, W, k.data() + h * hd, W, 0.0f,
                    scores.data(), nk);
        for (int i = 0; i < nb; ++i)
          softmax_inplace(scores.data() + static_cast<size_t>(i) * nk, nk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, hd, nk, 1.0f, scores.data(), nk,
                    v.data() + h * hd, W, 0.0f, att.data() + static_cast<size_t>(r0) * W + h * hd,
                    W);
      }
    }
    return lin(name + ".out_proj", att.data(), nq, true);
  }

  // x + linear_b(gelu(linear_a(norm(x)))): the feed-forward blocks.
  void ffn_residual(std::vector<float>& x, int rows, const std::string& norm_name,
                    const std::string& a, const std::string& b) const {
    const std::vector<float> n = norm(norm_name, x.data(), rows, W_);
    std::vector<float> hid = lin(a, n.data(), rows, true);
    for (float& e : hid) e = gelu_erff(e);
    const std::vector<float> out = lin(b, hid.data(), rows, true);
    for (size_t i = 0; i < x.size(); ++i) x[i] += out[i];
  }

  float scalar(const std::string& name) const {
    const model::Tensor& t = r_.head_tensor(name);
    if (t.numel() != 1) throw std::runtime_error("joint head: " + name + " is not a scalar");
    return t.at(0);
  }

  int W() const { return W_; }

 private:
  const model::Release& r_;
  int W_, heads_;
};

void add_into(std::vector<float>& x, const std::vector<float>& y) {
  for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
}

// Mean of rows [s.start, s.end) of x [T, n].
void span_mean(const float* x, int n, encoding::Span s, float* out) {
  std::vector<double> acc(n, 0.0);
  for (int t = s.start; t < s.end; ++t)
    for (int i = 0; i < n; ++i) acc[i] += x[static_cast<size_t>(t) * n + i];
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(acc[i] / (s.end - s.start));
}

void check_span(encoding::Span s, int T, const std::string& what) {
  if (s.start < 0 || s.end > T || s.start > s.end)
    throw std::runtime_error("joint head: " + what + " span [" + std::to_string(s.start) + ", " +
                             std::to_string(s.end) + ") is outside the " + std::to_string(T) +
                             "-token input");
  if (s.start == s.end) throw std::runtime_error("joint head: " + what + " span is empty");
}

// x / max(||x||, eps) in double.
std::vector<double> normalized(const float* x, int n, double eps) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double d = std::max(std::sqrt(ss), eps);
  std::vector<double> y(n);
  for (int i = 0; i < n; ++i) y[i] = x[i] / d;
  return y;
}

}  // namespace

std::vector<std::vector<float>> run_joint_head(const model::Release& release, const float* hidden,
                                               int T, const encoding::EncodedRequest& enc) {
  const Head head(release);
  const int D = release.head.hidden_size, W = head.W();
  if (T <= 0 || static_cast<size_t>(T) != enc.input_ids.size())
    throw std::runtime_error("joint head: hidden states do not match the encoded input");
  if (enc.questions.empty()) throw std::runtime_error("joint head: no questions");
  const model::Tensor& E = release.backbone("lm_head.weight");
  if (E.shape.size() != 2 || E.shape[1] != D)
    throw std::runtime_error("joint head: hidden_size " + std::to_string(D) +
                             " does not match lm_head.weight");
  const int64_t vocab = E.shape[0];

  const std::vector<float> S = head.norm("hidden_norm", hidden, T, D);
  const std::vector<float> M = head.lin("memory_projection", S.data(), T, false);
  const float* g = S.data() + static_cast<size_t>(T - 1) * D;

  const int nq = static_cast<int>(enc.questions.size());
  int N = 0;
  for (const auto& q : enc.questions) {
    if (q.option_spans.empty())
      throw std::runtime_error("joint head: question " + q.id + " has no options");
    N += static_cast<int>(q.option_spans.size());
  }
  std::vector<float> Q(static_cast<size_t>(nq) * D), C(static_cast<size_t>(N) * D), Lx(C.size());
  std::vector<int> owner(N);
  std::vector<float> row(D);
  for (int k = 0, j = 0; k < nq; ++k) {
    const auto& q = enc.questions[k];
    check_span(q.question_span, T, "question " + q.id);
    span_mean(S.data(), D, q.question_span, Q.data() + static_cast<size_t>(k) * D);
    for (const auto& s : q.option_spans) {
      check_span(s, T, "option of question " + q.id);
      span_mean(S.data(), D, s, C.data() + static_cast<size_t>(j) * D);
      std::vector<double> acc(D, 0.0);
      for (int t = s.start; t < s.end; ++t) {
        const int32_t id = enc.input_ids[t];
        if (id < 0 || id >= vocab) throw std::runtime_error("joint head: token id outside lm_head");
        E.to_float(row.data(), static_cast<size_t>(id) * D, D);
        for (int i = 0; i < D; ++i) acc[i] += row[i];
      }
      for (int i = 0; i < D; ++i)
        Lx[static_cast<size_t>(j) * D + i] = static_cast<float>(acc[i] / (s.end - s.start));
      owner[j++] = k;
    }
  }

  // Option queries, then the evidence-routing layers (cross-attention of the options to the
  // memory).
  std::vector<float> O = head.lin("option_context_projection", C.data(), N, false);
  add_into(O, head.lin("option_lexical_projection", Lx.data(), N, false));
  const std::vector<float> oq = head.lin("option_question_projection", Q.data(), nq, false);
  for (int j = 0; j < N; ++j)
    for (int i = 0; i < W; ++i)
      O[static_cast<size_t>(j) * W + i] += oq[static_cast<size_t>(owner[j]) * W + i];
  for (int l = 0; l < release.head.routing_layers; ++l) {
    const std::string p = "evidence_layers." + std::to_string(l) + ".";
    const std::vector<float> mem = head.norm(p + "memory_norm", M.data(), T, W);
    const std::vector<float> qn = head.norm(p + "query_norm", O.data(), N, W);
    add_into(O, head.mha(p + "attention", qn.data(), N, mem.data(), T));
    head.ffn_residual(O, N, p + "feedforward_norm", p + "feedforward.0", p + "feedforward.3");
  }

  // Fields: question text + attention summary of its own options + global token + type embedding.
  const std::vector<float> f0 = head.lin("question_projection", Q.data(), nq, false);
  std::vector<float> summary(static_cast<size_t>(nq) * W, 0.0f);
  for (int k = 0, j0 = 0; k < nq; ++k) {
    const int n = static_cast<int>(enc.questions[k].option_spans.size());
    std::vector<float> a(n);
    for (int j = 0; j < n; ++j) {
      double dot = 0.0;
      for (int i = 0; i < W; ++i)
        dot += static_cast<double>(O[static_cast<size_t>(j0 + j) * W + i]) *
               f0[static_cast<size_t>(k) * W + i];
      a[j] = static_cast<float>(dot / std::sqrt(static_cast<double>(W)));
    }
    softmax_inplace(a.data(), n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < W; ++i)
        summary[static_cast<size_t>(k) * W + i] += a[j] * O[static_cast<size_t>(j0 + j) * W + i];
    j0 += n;
  }
  std::vector<float> F = f0;
  add_into(F, head.norm("option_summary_norm", summary.data(), nq, W));
  const std::vector<float> gp = head.lin("global_projection", g, 1, false);
  const model::Tensor& type_emb = release.head_tensor("type_embedding.weight");
  std::vector<float> type_row(W);
  for (int k = 0; k < nq; ++k) {
    type_emb.to_float(type_row.data(), static_cast<size_t>(enc.questions[k].type) * W, W);
    for (int i = 0; i < W; ++i) F[static_cast<size_t>(k) * W + i] += gp[i] + type_row[i];
  }
  for (int l = 0; l < release.head.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::vector<float> n1 = head.norm(p + "norm1", F.data(), nq, W);
    add_into(F, head.mha(p + "self_attn", n1.data(), nq, n1.data(), nq));
    const std::vector<float> n2 = head.norm(p + "norm2", F.data(), nq, W);
    add_into(F, head.mha(p + "multihead_attn", n2.data(), nq, M.data(), T));
    head.ffn_residual(F, nq, p + "norm3", p + "linear1", p + "linear2");
  }
  F = head.norm("field_norm", F.data(), nq, W);
  const std::vector<float> U = head.norm("option_norm", O.data(), N, W);

  // Residual scorer input [F_k, u, F_k*u, |F_k - u|] for every option.
  std::vector<float> feat(static_cast<size_t>(N) * 4 * W);
  for (int j = 0; j < N; ++j) {
    const float* f = F.data() + static_cast<size_t>(owner[j]) * W;
    const float* u = U.data() + static_cast<size_t>(j) * W;
    float* out = feat.data() + static_cast<size_t>(j) * 4 * W;
    for (int i = 0; i < W; ++i) {
      out[i] = f[i];
      out[W + i] = u[i];
      out[2 * W + i] = f[i] * u[i];
      out[3 * W + i] = std::fabs(f[i] - u[i]);
    }
  }
  std::vector<float> hid = head.lin("residual_scorer.0", feat.data(), N, true);
  for (float& e : hid) e = gelu_erff(e);
  const std::vector<float> residual = head.lin("residual_scorer.3", hid.data(), N, true);  // [N, 1]

  // Scales are clamped in log space first, then exponentiated (as the reference, in float32).
  const float ln100 = static_cast<float>(std::log(100.0));
  const float prior_scale = std::exp(std::min(head.scalar("prior_logit_scale"), ln100));
  const float joint_scale = std::exp(std::min(head.scalar("joint_logit_scale"), ln100));
  const float gate = sigmoidf(head.scalar("residual_gate"));

  std::vector<std::vector<float>> logits(nq);
  std::vector<float> anchor_in(D);
  for (int k = 0, j = 0; k < nq; ++k) {
    for (int i = 0; i < D; ++i) anchor_in[i] = Q[static_cast<size_t>(k) * D + i] + g[i];
    const std::vector<double> anchor = normalized(anchor_in.data(), D, 1e-12);
    const std::vector<double> fk = normalized(F.data() + static_cast<size_t>(k) * W, W, 1e-8);
    for (size_t o = 0; o < enc.questions[k].option_spans.size(); ++o, ++j) {
      const std::vector<double> lex = normalized(Lx.data() + static_cast<size_t>(j) * D, D, 1e-12);
      double prior = 0.0;
      for (int i = 0; i < D; ++i) prior += lex[i] * anchor[i];
      const std::vector<double> uj = normalized(U.data() + static_cast<size_t>(j) * W, W, 1e-8);
      double cosine = 0.0;
      for (int i = 0; i < W; ++i) cosine += fk[i] * uj[i];
      const float joint = joint_scale * static_cast<float>(cosine) + residual[j];
      logits[k].push_back(prior_scale * static_cast<float>(prior) + gate * joint);
    }
  }
  return logits;
}

}  // namespace clef::engine::cpu

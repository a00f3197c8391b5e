#include "engine/cpu/gated_deltanet.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/cpu/linear.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/parallel.h"

namespace clef::engine::cpu {

namespace {

// One value head over all T tokens. Written once, compiled twice (baseline and AVX2 below): the
// rows of the state are contiguous dv-vectors, so the inner loops vectorise.
inline __attribute__((always_inline)) void gdn_head_body(const float* q, const float* k,
                                                         const float* v, const float* g,
                                                         const float* beta, int T, int Hk, int Hv,
                                                         int dk, int dv, int h, int kh, float* o) {
  std::vector<float> state(static_cast<size_t>(dk) * dv, 0.0f), a(dv), b(dv), delta(dv);
  float* __restrict S = state.data();
  float* __restrict pa = a.data();
  float* __restrict pb = b.data();
  float* __restrict pd = delta.data();
  for (int t = 0; t < T; ++t) {
    const float* __restrict qt = q + (static_cast<size_t>(t) * Hk + kh) * dk;
    const float* __restrict kt = k + (static_cast<size_t>(t) * Hk + kh) * dk;
    const float* __restrict vt = v + (static_cast<size_t>(t) * Hv + h) * dv;
    float* __restrict ot = o + (static_cast<size_t>(t) * Hv + h) * dv;
    const float decay = std::exp(g[static_cast<size_t>(t) * Hv + h]);
    const float bt = beta[static_cast<size_t>(t) * Hv + h];
    // One read pass over the old state: a = S^T k, b = S^T q. With S' = decay*S + k delta^T:
    //   delta = beta * (v - decay * a);  o = S'^T q = decay * b + delta * (k . q).
    std::fill(pa, pa + dv, 0.0f);
    std::fill(pb, pb + dv, 0.0f);
    float kq = 0.0f;
    for (int i = 0; i < dk; ++i) {
      const float* __restrict Si = S + static_cast<size_t>(i) * dv;
      const float ki = kt[i], qi = qt[i];
      kq += ki * qi;
      for (int j = 0; j < dv; ++j) {
        pa[j] += Si[j] * ki;
        pb[j] += Si[j] * qi;
      }
    }
    for (int j = 0; j < dv; ++j) {
      pd[j] = bt * (vt[j] - decay * pa[j]);
      ot[j] = decay * pb[j] + pd[j] * kq;
    }
    // Decay and rank-1 delta update of the state.
    for (int i = 0; i < dk; ++i) {
      float* __restrict Si = S + static_cast<size_t>(i) * dv;
      const float ki = kt[i];
      for (int j = 0; j < dv; ++j) Si[j] = decay * Si[j] + ki * pd[j];
    }
  }
}

void gdn_head_baseline(const float* q, const float* k, const float* v, const float* g,
                       const float* beta, int T, int Hk, int Hv, int dk, int dv, int h, int kh,
                       float* o) {
  gdn_head_body(q, k, v, g, beta, T, Hk, Hv, dk, dv, h, kh, o);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CLEF_GDN_AVX2 1
// The project builds for baseline x86-64; this copy runs where the CPU has AVX2 (checked at run
// time).
__attribute__((target("avx2"))) void gdn_head_avx2(const float* q, const float* k, const float* v,
                                                   const float* g, const float* beta, int T, int Hk,
                                                   int Hv, int dk, int dv, int h, int kh,
                                                   float* o) {
  gdn_head_body(q, k, v, g, beta, T, Hk, Hv, dk, dv, h, kh, o);
}
#endif

}  // namespace

void gated_delta_rule(const float* q, const float* k, const float* v, const float* g,
                      const float* beta, int T, int Hk, int Hv, int dk, int dv, float* o,
                      int threads) {
  if (Hk <= 0 || Hv % Hk != 0)
    throw std::runtime_error("gated delta rule: value heads (" + std::to_string(Hv) +
                             ") must be a multiple of key heads (" + std::to_string(Hk) + ")");
  const int ratio = Hv / Hk;
  auto head_fn = &gdn_head_baseline;
#ifdef CLEF_GDN_AVX2
  if (__builtin_cpu_supports("avx2")) head_fn = &gdn_head_avx2;
#endif
  const double flops = 8.0 * T * Hv * dk * dv;
  parallel_for(Hv, threads_for(flops, threads),
               [&](int h) { head_fn(q, k, v, g, beta, T, Hk, Hv, dk, dv, h, h / ratio, o); });
}

namespace {

// l2-normalise each of `n` vectors of `d` in place (eps 1e-6 under the root), then scale.
void l2_normalise(float* x, size_t n, int d, float scale) {
  for (size_t r = 0; r < n; ++r) {
    float* xr = x + r * d;
    float ss = 0.0f;
    for (int i = 0; i < d; ++i) ss += xr[i] * xr[i];
    const float inv = scale / std::sqrt(ss + 1e-6f);
    for (int i = 0; i < d; ++i) xr[i] *= inv;
  }
}

}  // namespace

std::vector<float> gated_deltanet_mixer(const model::Release& release, int layer, const float* u,
                                        int T, int threads, GemmInputs inputs) {
  const auto& c = release.text;
  const int Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads;
  const int dk = c.linear_key_head_dim, dv = c.linear_value_head_dim, K = c.linear_conv_kernel_dim;
  const int C = 2 * Hk * dk + Hv * dv;
  const std::string p = "layers." + std::to_string(layer) + ".linear_attn.";

  std::vector<float> qkv =
      linear(release.backbone(p + "in_proj_qkv.weight"), u, T, nullptr, inputs);
  std::vector<float> z = linear(release.backbone(p + "in_proj_z.weight"), u, T, nullptr, inputs);
  std::vector<float> bproj = linear(release.backbone(p + "in_proj_b.weight"), u, T);
  std::vector<float> aproj = linear(release.backbone(p + "in_proj_a.weight"), u, T);
  const std::vector<float> conv_w = to_f32(release.backbone(p + "conv1d.weight"));  // [C, 1, K]
  const std::vector<float> dt_bias = to_f32(release.backbone(p + "dt_bias"));
  const std::vector<float> A_log = to_f32(release.backbone(p + "A_log"));
  const std::vector<float> norm_w = to_f32(release.backbone(p + "norm.weight"));

  // Causal depthwise conv (zero history; tap K-1 is the current token) + SiLU, split into q | k |
  // v.
  std::vector<float> q(static_cast<size_t>(T) * Hk * dk), k(q.size()),
      v(static_cast<size_t>(T) * Hv * dv);
  for (int t = 0; t < T; ++t) {
    for (int ch = 0; ch < C; ++ch) {
      float acc = 0.0f;
      for (int j = 0; j < K; ++j) {
        const int src = t - (K - 1) + j;
        if (src >= 0)
          acc += conv_w[static_cast<size_t>(ch) * K + j] * qkv[static_cast<size_t>(src) * C + ch];
      }
      const float y = siluf(acc);
      if (ch < Hk * dk)
        q[static_cast<size_t>(t) * Hk * dk + ch] = y;
      else if (ch < 2 * Hk * dk)
        k[static_cast<size_t>(t) * Hk * dk + (ch - Hk * dk)] = y;
      else
        v[static_cast<size_t>(t) * Hv * dv + (ch - 2 * Hk * dk)] = y;
    }
  }
  qkv.clear();
  qkv.shrink_to_fit();
  l2_normalise(q.data(), static_cast<size_t>(T) * Hk, dk, 1.0f / std::sqrt(static_cast<float>(dk)));
  l2_normalise(k.data(), static_cast<size_t>(T) * Hk, dk, 1.0f);

  std::vector<float> beta(static_cast<size_t>(T) * Hv), g(beta.size());
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < Hv; ++h) {
      const size_t i = static_cast<size_t>(t) * Hv + h;
      beta[i] = sigmoidf(bproj[i]);
      g[i] = -std::exp(A_log[h]) * softplusf(aproj[i] + dt_bias[h]);
    }
  }

  std::vector<float> o(static_cast<size_t>(T) * Hv * dv);
  gated_delta_rule(q.data(), k.data(), v.data(), g.data(), beta.data(), T, Hk, Hv, dk, dv, o.data(),
                   threads);

  // Gated RMSNorm per head over dv (plain weight, not 1 + w), times silu(z).
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (size_t r = 0; r < static_cast<size_t>(T) * Hv; ++r) {
    float* orow = o.data() + r * dv;
    const float* zr = z.data() + r * dv;
    float ss = 0.0f;
    for (int j = 0; j < dv; ++j) ss += orow[j] * orow[j];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dv) + eps);
    for (int j = 0; j < dv; ++j) orow[j] = orow[j] * inv * norm_w[j] * siluf(zr[j]);
  }
  return linear(release.backbone(p + "out_proj.weight"), o.data(), T, nullptr, inputs);
}

}  // namespace clef::engine::cpu

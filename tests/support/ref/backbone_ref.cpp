// CPU references for the backbone kernels (see backbone_ref.h): plain loops, fp32 (double sums
// where cheap).
#include "support/ref/backbone_ref.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace clef::engine::ref {
namespace {
float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
float silu(float x) {
  return x / (1.0f + std::exp(-x));
}
float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}
float rnd(float x, bool bf16) {
  return bf16 ? round_bf16(x) : x;
}
}  // namespace

float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) {  // inf / nan: keep (quiet the nan)
    if (u & 0x007fffffu) u |= 0x00400000u;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
  }
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

void rms_norm_1p_ref(const float* x, const float* w, float* out, int rows, int D, float eps,
                     bool bf16) {
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < D; ++i) ss += double(x[r * D + i]) * x[r * D + i];
    const float rs = 1.0f / std::sqrt(float(ss / D) + eps);
    for (int i = 0; i < D; ++i) out[r * D + i] = rnd((x[r * D + i] * rs) * (1.0f + w[i]), bf16);
  }
}

void gdn_conv_silu_ref(const float* proj, int T, int ld, int C, int K, const float* conv_w,
                       bool bf16, float* s, const int32_t* positions) {
  for (int t = 0; t < T; ++t) {
    const int p = positions ? positions[t] : t;  // taps reach back at most p rows
    for (int ch = 0; ch < C; ++ch) {
      float acc = 0;
      for (int j = 0; j < K; ++j) {
        const int tt = t - (K - 1) + j;
        if (K - 1 - j <= p) acc += conv_w[ch * K + j] * proj[static_cast<size_t>(tt) * ld + ch];
      }
      s[static_cast<size_t>(t) * C + ch] = silu(rnd(acc, bf16));
    }
  }
}

double gdn_l2_factor(const float* x, int d, double scale) {
  double ss = 0;
  for (int i = 0; i < d; ++i) ss += double(x[i]) * x[i];
  return scale / std::sqrt(ss + double(1e-6f));
}

void gdn_conv_prep_ref(const float* proj, int T, int ld, int Hk, int Hv, int dk, int dv, int K,
                       int b_off, int a_off, const float* conv_w, const float* A_log,
                       const float* dt_bias, bool bf16, float* q, float* k, float* v, float* g,
                       float* beta, const int32_t* positions) {
  const int Cq = Hk * dk, Cv = Hv * dv, Ctot = 2 * Cq + Cv;
  std::vector<float> y(static_cast<size_t>(T) * Ctot);
  gdn_conv_silu_ref(proj, T, ld, Ctot, K, conv_w, bf16, y.data(), positions);
  for (auto& x : y) x = rnd(x, bf16);
  for (int t = 0; t < T; ++t) {
    const float* yt = &y[static_cast<size_t>(t) * Ctot];
    for (int part = 0; part < 2; ++part) {
      for (int h = 0; h < Hk; ++h) {
        const float* src = yt + part * Cq + h * dk;
        double ss = 0;
        for (int d = 0; d < dk; ++d) ss += double(src[d]) * src[d];
        const float inv = 1.0f / std::sqrt(float(ss) + 1e-6f);
        float* dst = (part == 0 ? q : k) + (static_cast<size_t>(t) * Hk + h) * dk;
        for (int d = 0; d < dk; ++d)
          dst[d] = part == 0 ? (src[d] * inv) * (1.0f / std::sqrt(float(dk))) : src[d] * inv;
      }
    }
    for (int i = 0; i < Cv; ++i) v[static_cast<size_t>(t) * Cv + i] = yt[2 * Cq + i];
    for (int h = 0; h < Hv; ++h) {
      const float b = proj[static_cast<size_t>(t) * ld + b_off + h];
      const float a = proj[static_cast<size_t>(t) * ld + a_off + h];
      beta[t * Hv + h] = rnd(sigmoid(b), bf16);
      g[t * Hv + h] = -std::exp(A_log[h]) * softplus(a + dt_bias[h]);
    }
  }
}

void gated_delta_rule_ref(const float* q, const float* k, const float* v, const float* g,
                          const float* beta, int T, int Hk, int Hv, int dk, int dv, float* o) {
  const int r = Hv / Hk;
  std::vector<double> S(static_cast<size_t>(dk) * dv);
  std::vector<double> kv(dv);
  for (int h = 0; h < Hv; ++h) {
    std::fill(S.begin(), S.end(), 0.0);
    const int kh = h / r;
    for (int t = 0; t < T; ++t) {
      const float* qt = q + (static_cast<size_t>(t) * Hk + kh) * dk;
      const float* kt = k + (static_cast<size_t>(t) * Hk + kh) * dk;
      const float* vt = v + (static_cast<size_t>(t) * Hv + h) * dv;
      const double decay = std::exp(double(g[t * Hv + h])), b = beta[t * Hv + h];
      for (auto& s : S) s *= decay;
      for (int c = 0; c < dv; ++c) {
        double sk = 0;
        for (int d = 0; d < dk; ++d) sk += S[d * dv + c] * kt[d];
        kv[c] = b * (vt[c] - sk);
      }
      for (int d = 0; d < dk; ++d)
        for (int c = 0; c < dv; ++c) S[d * dv + c] += double(kt[d]) * kv[c];
      for (int c = 0; c < dv; ++c) {
        double acc = 0;
        for (int d = 0; d < dk; ++d) acc += S[d * dv + c] * qt[d];
        o[(static_cast<size_t>(t) * Hv + h) * dv + c] = float(acc);
      }
    }
  }
}

void gated_rms_norm_ref(const float* o, const float* z, int ldz, const float* w, float* y, int T,
                        int H, int dv, float eps, bool bf16) {
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const float* row = o + (static_cast<size_t>(t) * H + h) * dv;
      double ss = 0;
      for (int i = 0; i < dv; ++i) ss += double(row[i]) * row[i];
      const float rs = 1.0f / std::sqrt(float(ss / dv) + eps);
      for (int i = 0; i < dv; ++i) {
        const float n = rnd(row[i] * rs, bf16);
        const float zw = rnd(w[i] * n, bf16);
        y[(static_cast<size_t>(t) * H + h) * dv + i] =
            rnd(zw * silu(z[static_cast<size_t>(t) * ldz + h * dv + i]), bf16);
      }
    }
}

void attn_prep_ref(const float* proj, int T, int ld, int nh, int nkv, int hd, int rd, float eps,
                   const float* inv_freq, const float* qw, const float* kw, bool bf16, float* q,
                   float* k, float* v, const int32_t* positions) {
  std::vector<float> n(hd);
  const int half = rd / 2;
  for (int t = 0; t < T; ++t) {
    const float* row = proj + static_cast<size_t>(t) * ld;
    for (int hy = 0; hy < nh + nkv; ++hy) {
      const bool is_q = hy < nh;
      const int h = is_q ? hy : hy - nh;
      const float* src = is_q ? row + h * 2 * hd : row + nh * 2 * hd + h * hd;
      const float* w = is_q ? qw : kw;
      float* dst = is_q ? q + (static_cast<size_t>(t) * nh + h) * hd
                        : k + (static_cast<size_t>(t) * nkv + h) * hd;
      double ss = 0;
      for (int i = 0; i < hd; ++i) ss += double(src[i]) * src[i];
      const float rs = 1.0f / std::sqrt(float(ss / hd) + eps);
      for (int i = 0; i < hd; ++i) n[i] = rnd((src[i] * rs) * (1.0f + w[i]), bf16);
      for (int i = 0; i < hd; ++i) {
        if (i >= rd) {
          dst[i] = n[i];
          continue;
        }
        const float ang = float(positions ? positions[t] : t) * inv_freq[i < half ? i : i - half];
        const float c = rnd(std::cos(ang), bf16), s = rnd(std::sin(ang), bf16);
        const float rh = i < half ? -n[i + half] : n[i - half];
        dst[i] = rnd(rnd(n[i] * c, bf16) + rnd(rh * s, bf16), bf16);
      }
    }
    for (int h = 0; h < nkv; ++h)
      for (int i = 0; i < hd; ++i)
        v[(static_cast<size_t>(t) * nkv + h) * hd + i] = row[nh * 2 * hd + nkv * hd + h * hd + i];
  }
}

void attn_output_gate_ref(float* attn, const float* proj, int ld, int T, int nh, int hd,
                          bool bf16) {
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < nh; ++h)
      for (int i = 0; i < hd; ++i) {
        const float gate =
            rnd(sigmoid(proj[static_cast<size_t>(t) * ld + h * 2 * hd + hd + i]), bf16);
        float& a = attn[(static_cast<size_t>(t) * nh + h) * hd + i];
        a = rnd(a * gate, bf16);
      }
}

void swiglu_ref(const float* gu, float* out, int T, int I, bool bf16) {
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < I; ++i) {
      const float gt = rnd(silu(gu[static_cast<size_t>(t) * 2 * I + i]), bf16);
      out[static_cast<size_t>(t) * I + i] =
          rnd(gt * gu[static_cast<size_t>(t) * 2 * I + I + i], bf16);
    }
}

}  // namespace clef::engine::ref

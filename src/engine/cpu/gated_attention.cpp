#include "engine/cpu/gated_attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/cpu/linear.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/parallel.h"

namespace clef::engine::cpu {

void rope_tables(int T, int rd, double theta, std::vector<float>& cos_t,
                 std::vector<float>& sin_t) {
  const int half = rd / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(rd);
    inv_freq[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(expo)));
  }
  cos_t.assign(static_cast<size_t>(T) * half, 0.0f);
  sin_t.assign(cos_t.size(), 0.0f);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[i];
      cos_t[static_cast<size_t>(t) * half + i] =
          static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_t[static_cast<size_t>(t) * half + i] =
          static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void mrope_tables(int T, int rd, double theta, const std::vector<int>& section,
                  const int32_t* position_ids, std::vector<float>& cos_t,
                  std::vector<float>& sin_t) {
  const int half = rd / 2;
  if (section.size() != 3)
    throw std::runtime_error("attention: multimodal positions need a 3-entry mrope_section");
  std::vector<float> inv_freq(half);
  std::vector<int> axis(half, 0);
  for (int i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(rd);
    inv_freq[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(expo)));
    if (i % 3 == 1 && i < 3 * section[1]) axis[i] = 1;
    if (i % 3 == 2 && i < 3 * section[2]) axis[i] = 2;
  }
  cos_t.assign(static_cast<size_t>(T) * half, 0.0f);
  sin_t.assign(cos_t.size(), 0.0f);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const float pos = static_cast<float>(position_ids[static_cast<size_t>(axis[i]) * T + t]);
      const float angle = pos * inv_freq[i];
      cos_t[static_cast<size_t>(t) * half + i] =
          static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_t[static_cast<size_t>(t) * half + i] =
          static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void apply_rope(float* x, int heads, int head_dim, int rd, const float* cos_row,
                const float* sin_row) {
  const int half = rd / 2;
  for (int h = 0; h < heads; ++h) {
    float* xh = x + static_cast<size_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float x1 = xh[i], x2 = xh[i + half];
      xh[i] = x1 * cos_row[i] - x2 * sin_row[i];
      xh[i + half] = x2 * cos_row[i] + x1 * sin_row[i];
    }
  }
}

void causal_attention(const float* q, int ldq, const float* k, const float* v, int ldkv, int T,
                      int nh, int nkv, int hd, float* out, int ldo, int threads) {
  if (nkv <= 0 || nh % nkv != 0)
    throw std::runtime_error("attention: query heads must be a multiple of key/value heads");
  const int group = nh / nkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Query blocks bound the score buffer to kBlock x T; each block's GEMMs use OpenBLAS's threads
  // and the softmax rows are spread over std::threads.
  constexpr int kBlock = 256;
  std::vector<float> scores(static_cast<size_t>(std::min(T, kBlock)) * T);
  for (int j = 0; j < nh; ++j) {
    const int kvh = j / group;
    for (int r0 = 0; r0 < T; r0 += kBlock) {
      const int nb = std::min(kBlock, T - r0);
      const int nk = r0 + nb;  // keys 0..nk-1 are visible to some row of the block
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, nk, hd, scale,
                  q + static_cast<size_t>(r0) * ldq + static_cast<size_t>(j) * hd, ldq,
                  k + static_cast<size_t>(kvh) * hd, ldkv, 0.0f, scores.data(), nk);
      const int parts = threads_for(12.0 * nb * nk, threads);
      parallel_for(parts, parts, [&](int part) {
        for (int i = part; i < nb; i += parts) {
          float* row = scores.data() + static_cast<size_t>(i) * nk;
          const int visible = r0 + i + 1;
          softmax_inplace(row, static_cast<size_t>(visible));
          std::fill(row + visible, row + nk, 0.0f);
        }
      });
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, hd, nk, 1.0f, scores.data(), nk,
                  v + static_cast<size_t>(kvh) * hd, ldkv, 0.0f,
                  out + static_cast<size_t>(r0) * ldo + static_cast<size_t>(j) * hd, ldo);
    }
  }
}

std::vector<float> gated_attention_mixer(const model::Release& release, int layer, const float* u,
                                         int T, int threads, const int32_t* position_ids,
                                         GemmInputs inputs) {
  const auto& c = release.text;
  const int nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
  const int rd = static_cast<int>(hd * c.partial_rotary_factor);
  if (rd % 2 != 0 || rd > hd)
    throw std::runtime_error("attention: rotary dims must be even and <= head_dim");
  const std::string p = "layers." + std::to_string(layer) + ".self_attn.";
  const float eps = static_cast<float>(c.rms_norm_eps);

  const std::vector<float> qg =
      linear(release.backbone(p + "q_proj.weight"), u, T, nullptr, inputs);  // [T, nh, 2hd]
  std::vector<float> k =
      linear(release.backbone(p + "k_proj.weight"), u, T, nullptr, inputs);  // [T, nkv, hd]
  const std::vector<float> v = linear(release.backbone(p + "v_proj.weight"), u, T, nullptr, inputs);
  const std::vector<float> qn = to_f32(release.backbone(p + "q_norm.weight"));
  const std::vector<float> kn = to_f32(release.backbone(p + "k_norm.weight"));

  std::vector<float> q(static_cast<size_t>(T) * nh * hd), gate(q.size());
  for (size_t r = 0; r < static_cast<size_t>(T) * nh; ++r) {
    const float* src = qg.data() + r * 2 * hd;
    std::copy(src, src + hd, q.data() + r * hd);
    std::copy(src + hd, src + 2 * hd, gate.data() + r * hd);
  }
  rms_norm_1p(q.data(), qn.data(), eps, static_cast<size_t>(T) * nh, hd, q.data());
  rms_norm_1p(k.data(), kn.data(), eps, static_cast<size_t>(T) * nkv, hd, k.data());
  if (rd > 0) {
    std::vector<float> cos_t, sin_t;
    if (position_ids) {
      mrope_tables(T, rd, c.rope_theta, c.mrope_section, position_ids, cos_t, sin_t);
    } else {
      rope_tables(T, rd, c.rope_theta, cos_t, sin_t);
    }
    for (int t = 0; t < T; ++t) {
      const float* cr = cos_t.data() + static_cast<size_t>(t) * (rd / 2);
      const float* sr = sin_t.data() + static_cast<size_t>(t) * (rd / 2);
      apply_rope(q.data() + static_cast<size_t>(t) * nh * hd, nh, hd, rd, cr, sr);
      apply_rope(k.data() + static_cast<size_t>(t) * nkv * hd, nkv, hd, rd, cr, sr);
    }
  }

  std::vector<float> attn(q.size());
  causal_attention(q.data(), nh * hd, k.data(), v.data(), nkv * hd, T, nh, nkv, hd, attn.data(),
                   nh * hd, threads);
  for (size_t i = 0; i < attn.size(); ++i) attn[i] *= sigmoidf(gate[i]);
  return linear(release.backbone(p + "o_proj.weight"), attn.data(), T, nullptr, inputs);
}

}  // namespace clef::engine::cpu

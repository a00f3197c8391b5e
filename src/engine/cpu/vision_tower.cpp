#include "engine/cpu/vision_tower.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/cpu/gated_attention.h"
#include "engine/cpu/linear.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/parallel.h"
#include "media/check_visual_input.h"
#include "media/patchify.h"

namespace clef::engine::cpu {

namespace {

// Rows per MLP / merger pass: bounds the [rows, intermediate] activations of large images.
constexpr int64_t kChunkRows = 2048;
// Query rows per attention block: bounds the score buffer to kBlock x segment length.
constexpr int kBlock = 256;

struct Segment {
  int64_t start = 0, len = 0;  // patch rows [start, start + len) attend to each other only
};

const model::VisionConfig& tower_config(const model::Release& release) {
  if (!release.vision)
    throw std::runtime_error("this model has no vision tower (no model.visual.* weights)");
  return *release.vision;
}

// Non-causal softmax attention inside each segment. qkv: [rows, 3W] (q | k | v, head j at j*hd);
// out: [rows, W].
void segment_attention(const float* qkv, int W, int heads, int hd,
                       const std::vector<Segment>& segments, float* out, int threads) {
  const int ld = 3 * W;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (const Segment& s : segments) {
    const int n = static_cast<int>(s.len);
    std::vector<float> scores(static_cast<size_t>(std::min(n, kBlock)) * n);
    const float* base = qkv + static_cast<size_t>(s.start) * ld;
    for (int j = 0; j < heads; ++j) {
      for (int r0 = 0; r0 < n; r0 += kBlock) {
        const int nb = std::min(kBlock, n - r0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, n, hd, scale,
                    base + static_cast<size_t>(r0) * ld + static_cast<size_t>(j) * hd, ld,
                    base + W + static_cast<size_t>(j) * hd, ld, 0.0f, scores.data(), n);
        const int parts = threads_for(12.0 * nb * n, threads);
        parallel_for(parts, parts, [&](int part) {
          for (int i = part; i < nb; i += parts)
            softmax_inplace(scores.data() + static_cast<size_t>(i) * n, static_cast<size_t>(n));
        });
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, hd, n, 1.0f, scores.data(), n,
                    base + 2 * W + static_cast<size_t>(j) * hd, ld, 0.0f,
                    out + static_cast<size_t>(s.start + r0) * W + static_cast<size_t>(j) * hd, W);
      }
    }
  }
}

// One pre-norm block: x += proj(attn(norm1(x))); x += fc2(gelu_tanh(fc1(norm2(x)))).
void vision_block(const model::Release& release, int b, std::vector<float>& x, int64_t rows,
                  const std::vector<float>& cos_t, const std::vector<float>& sin_t,
                  const std::vector<Segment>& segments, int threads) {
  const model::VisionConfig& v = *release.vision;
  const int W = v.hidden_size, I = v.intermediate_size, heads = v.num_heads, hd = v.head_dim();
  const std::string p = "blocks." + std::to_string(b) + ".";
  const auto vt = [&](const std::string& n) -> const model::Tensor& {
    return release.visual(p + n);
  };
  constexpr float kEps = 1e-6f;
  const std::vector<float> n1w = to_f32(vt("norm1.weight")), n1b = to_f32(vt("norm1.bias"));
  const std::vector<float> n2w = to_f32(vt("norm2.weight")), n2b = to_f32(vt("norm2.bias"));
  const std::vector<float> qkv_b = to_f32(vt("attn.qkv.bias")),
                           proj_b = to_f32(vt("attn.proj.bias"));
  const std::vector<float> fc1_b = to_f32(vt("mlp.linear_fc1.bias"));
  const std::vector<float> fc2_b = to_f32(vt("mlp.linear_fc2.bias"));
  const size_t n = static_cast<size_t>(rows);

  {  // attention
    std::vector<float> u(n * W);
    layer_norm(x.data(), n1w.data(), n1b.data(), kEps, n, W, u.data());
    std::vector<float> qkv = linear(vt("attn.qkv.weight"), u.data(), static_cast<int>(rows),
                                    qkv_b.data());  // [rows, 3W]
    const int half = hd / 2;
    for (size_t r = 0; r < n; ++r) {
      float* row = qkv.data() + r * 3 * W;
      apply_rope(row, heads, hd, hd, cos_t.data() + r * half, sin_t.data() + r * half);
      apply_rope(row + W, heads, hd, hd, cos_t.data() + r * half, sin_t.data() + r * half);
    }
    segment_attention(qkv.data(), W, heads, hd, segments, u.data(), threads);
    qkv.clear();
    qkv.shrink_to_fit();
    const std::vector<float> o =
        linear(vt("attn.proj.weight"), u.data(), static_cast<int>(rows), proj_b.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
  }

  const model::Tensor& fc1 = vt("mlp.linear_fc1.weight");
  const model::Tensor& fc2 = vt("mlp.linear_fc2.weight");
  const int64_t chunk = std::min(rows, kChunkRows);
  std::vector<float> u(static_cast<size_t>(chunk) * W), mid(static_cast<size_t>(chunk) * I),
      down(u.size());
  for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
    const int m = static_cast<int>(std::min(kChunkRows, rows - r0));
    float* xr = x.data() + static_cast<size_t>(r0) * W;
    layer_norm(xr, n2w.data(), n2b.data(), kEps, m, W, u.data());
    linear(fc1, u.data(), m, W, mid.data(), I, fc1_b.data());
    for (size_t i = 0; i < static_cast<size_t>(m) * I; ++i) mid[i] = gelu_tanhf(mid[i]);
    linear(fc2, mid.data(), m, I, down.data(), W, fc2_b.data());
    for (size_t i = 0; i < static_cast<size_t>(m) * W; ++i) xr[i] += down[i];
  }
}

}  // namespace

void check_visual_input(const model::Release& release, const media::VisualInput& visual) {
  media::check_visual_input(visual, tower_config(release).patch_values());
}

std::vector<float> vision_position_embedding(const model::Release& release, int h, int w) {
  const model::VisionConfig& v = tower_config(release);
  const int W = v.hidden_size;
  const int side = static_cast<int>(std::lround(std::sqrt(v.num_position_embeddings)));
  const model::Tensor& table = release.visual("pos_embed.weight");
  // Per axis: the two taps and their weights, closed form in fp32 (docs/spec/media.md §7).
  struct Taps {
    int lo = 0, hi = 0;
    float w_lo = 0, w_hi = 0;
  };
  auto taps = [&](int n) {
    std::vector<Taps> out(n);
    for (int i = 0; i < n; ++i) {
      const float src = (static_cast<float>(i) * static_cast<float>(side - 1)) /
                        static_cast<float>(std::max(n - 1, 1));
      const int f = static_cast<int>(std::floor(src));
      out[i].lo = std::min(f, side - 1);
      out[i].hi = std::min(f + 1, side - 1);
      out[i].w_lo = 1.0f - std::fabs(src - static_cast<float>(f));
      out[i].w_hi = std::max(0.0f, 1.0f - std::fabs(src - static_cast<float>(f) - 1.0f));
    }
    return out;
  };
  const std::vector<Taps> tr = taps(h), tc = taps(w);
  std::vector<float> rows(static_cast<size_t>(4) * W), out(static_cast<size_t>(h) * w * W);
  for (int64_t i = 0; i < static_cast<int64_t>(h) * w; ++i) {
    int32_t r = 0, c = 0;
    media::patch_coords(i, w, r, c);
    const int idx[4] = {tr[r].lo * side + tc[c].lo, tr[r].lo * side + tc[c].hi,
                        tr[r].hi * side + tc[c].lo, tr[r].hi * side + tc[c].hi};
    const float wt[4] = {tr[r].w_lo * tc[c].w_lo, tr[r].w_lo * tc[c].w_hi, tr[r].w_hi * tc[c].w_lo,
                         tr[r].w_hi * tc[c].w_hi};
    for (int k = 0; k < 4; ++k)
      table.to_float(rows.data() + static_cast<size_t>(k) * W, static_cast<size_t>(idx[k]) * W, W);
    float* o = out.data() + static_cast<size_t>(i) * W;
    for (int d = 0; d < W; ++d) {
      // Each product rounded before the sum, in tap order (the reference's four-term sum).
      const float p0 = rows[d] * wt[0], p1 = rows[W + d] * wt[1], p2 = rows[2 * W + d] * wt[2],
                  p3 = rows[3 * W + d] * wt[3];
      o[d] = ((p0 + p1) + p2) + p3;
    }
  }
  return out;
}

std::vector<float> run_vision_tower(const model::Release& release, const media::VisualInput& visual,
                                    int threads) {
  check_visual_input(release, visual);
  const model::VisionConfig& v = *release.vision;
  const int W = v.hidden_size, hd = v.head_dim(), half = hd / 2, quarter = hd / 4;
  std::vector<media::Grid> grids = visual.image_grids;
  grids.insert(grids.end(), visual.video_grids.begin(), visual.video_grids.end());
  const std::vector<float> pixels = media::pixel_rows(visual);
  const int64_t rows = static_cast<int64_t>(pixels.size() / media::kPatchValues);
  if (rows == 0) return {};

  // Patch embedding: the Conv3d over a (c, t, y, x) patch is a GEMM with the weight flattened
  // alike.
  const std::vector<float> pe_b = to_f32(release.visual("patch_embed.proj.bias"));
  std::vector<float> x(static_cast<size_t>(rows) * W);
  linear(release.visual("patch_embed.proj.weight"), pixels.data(), static_cast<int>(rows),
         media::kPatchValues, x.data(), W, pe_b.data());

  // Position embedding, 2-D rotary tables (row frequencies then column frequencies, 10000-based
  // over head_dim / 2) and the attention segments (one per temporal slice).
  std::vector<float> inv_freq(quarter);
  for (int i = 0; i < quarter; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(half);
    inv_freq[i] = static_cast<float>(1.0 / std::pow(v.rope_theta, static_cast<double>(expo)));
  }
  std::vector<float> cos_t(static_cast<size_t>(rows) * half), sin_t(cos_t.size());
  std::vector<Segment> segments;
  int64_t row = 0;
  for (const media::Grid& g : grids) {
    const std::vector<float> pos = vision_position_embedding(release, g.h, g.w);
    const int64_t hw = static_cast<int64_t>(g.h) * g.w;
    for (int t = 0; t < g.t; ++t) {
      segments.push_back({row, hw});
      for (int64_t i = 0; i < hw; ++i, ++row) {
        float* xr = x.data() + static_cast<size_t>(row) * W;
        const float* pr = pos.data() + static_cast<size_t>(i) * W;
        for (int d = 0; d < W; ++d) xr[d] += pr[d];
        int32_t r = 0, c = 0;
        media::patch_coords(i, g.w, r, c);
        float* cr = cos_t.data() + static_cast<size_t>(row) * half;
        float* sr = sin_t.data() + static_cast<size_t>(row) * half;
        for (int k = 0; k < quarter; ++k) {
          const float a_r = static_cast<float>(r) * inv_freq[k];
          const float a_c = static_cast<float>(c) * inv_freq[k];
          cr[k] = static_cast<float>(std::cos(static_cast<double>(a_r)));
          sr[k] = static_cast<float>(std::sin(static_cast<double>(a_r)));
          cr[quarter + k] = static_cast<float>(std::cos(static_cast<double>(a_c)));
          sr[quarter + k] = static_cast<float>(std::sin(static_cast<double>(a_c)));
        }
      }
    }
  }

  for (int b = 0; b < v.depth; ++b)
    vision_block(release, b, x, rows, cos_t, sin_t, segments, threads);

  // Merger: LayerNorm per patch, each 2 x 2 block's 4 rows side by side, fc1, erf GELU, fc2.
  const std::vector<float> nw = to_f32(release.visual("merger.norm.weight"));
  const std::vector<float> nb = to_f32(release.visual("merger.norm.bias"));
  layer_norm(x.data(), nw.data(), nb.data(), 1e-6f, static_cast<size_t>(rows), W, x.data());
  const int M = v.merged_width(), out_w = v.out_hidden_size;
  const int merge = v.spatial_merge_size * v.spatial_merge_size;
  const int64_t tokens = rows / merge;
  const std::vector<float> b1 = to_f32(release.visual("merger.linear_fc1.bias"));
  const std::vector<float> b2 = to_f32(release.visual("merger.linear_fc2.bias"));
  const model::Tensor& fc1 = release.visual("merger.linear_fc1.weight");
  const model::Tensor& fc2 = release.visual("merger.linear_fc2.weight");
  std::vector<float> out(static_cast<size_t>(tokens) * out_w);
  std::vector<float> mid(static_cast<size_t>(std::min(tokens, kChunkRows)) * M);
  for (int64_t t0 = 0; t0 < tokens; t0 += kChunkRows) {
    const int m = static_cast<int>(std::min(kChunkRows, tokens - t0));
    linear(fc1, x.data() + static_cast<size_t>(t0) * M, m, M, mid.data(), M, b1.data());
    for (size_t i = 0; i < static_cast<size_t>(m) * M; ++i) mid[i] = gelu_erff(mid[i]);
    linear(fc2, mid.data(), m, M, out.data() + static_cast<size_t>(t0) * out_w, out_w, b2.data());
  }
  return out;
}

}  // namespace clef::engine::cpu

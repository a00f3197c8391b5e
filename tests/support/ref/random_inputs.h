// Random inputs for the kernel checks (tests/engine/cuda) and the workbench (dev/cuda): normal and
// uniform vectors, rounding to bf16 so a reference sees exactly the kernel's bf16 inputs, and the
// GDN q / k heads in both input forms of the chunked rule.
#pragma once

#include <random>
#include <vector>

#include "support/ref/backbone_ref.h"

namespace clef::engine::ref {

inline std::vector<float> randn(std::mt19937_64& rng, size_t n, float scale = 1.0f,
                                float mean = 0.0f) {
  std::normal_distribution<float> d(mean, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
inline std::vector<float> randu(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
inline void round_all_bf16(std::vector<float>& v) {
  for (auto& x : v) x = round_bf16(x);
}

// GDN q or k heads (rows of d values) in both forms of engine/cuda/gdn/gdn.h GdnInputs: x random
// and exactly representable in bf16 (the bf16 form's xq / xk), the factor r = gdn_l2_factor(x,
// d, scale) of each row rounded to float (rq / rk; scale 1 / sqrt(dk) for q, 1 for k), and the
// fp32 form q = float(x r) (what the SIMT path and gated_delta_rule_ref read).
struct GdnFactoredRows {
  std::vector<float> x;  // [rows, d]
  std::vector<float> r;  // [rows]
  std::vector<float> q;  // [rows, d]
};
inline GdnFactoredRows gdn_factored_rows(std::mt19937_64& rng, size_t rows, int d, double scale) {
  GdnFactoredRows out{randn(rng, rows * d), std::vector<float>(rows), std::vector<float>(rows * d)};
  round_all_bf16(out.x);
  for (size_t row = 0; row < rows; ++row) {
    const float* x = &out.x[row * d];
    out.r[row] = static_cast<float>(gdn_l2_factor(x, d, scale));
    for (int i = 0; i < d; ++i) out.q[row * d + i] = x[i] * out.r[row];
  }
  return out;
}

}  // namespace clef::engine::ref

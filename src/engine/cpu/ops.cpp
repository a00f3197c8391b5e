#include "engine/cpu/ops.h"

#include <algorithm>

namespace clef::engine::cpu {

void rms_norm_1p(const float* x, const float* w, float eps, size_t rows, size_t n, float* y) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double ss = 0.0;
    for (size_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
    for (size_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * (w ? 1.0f + w[i] : 1.0f);
  }
}

void layer_norm(const float* x, const float* w, const float* b, float eps, size_t rows, size_t n,
                float* y) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(n);
    double var = 0.0;
    for (size_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(n);
    const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    const float m = static_cast<float>(mean);
    for (size_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * inv * w[i] + b[i];
  }
}

void softmax_inplace(float* x, size_t n) {
  if (n == 0) return;
  const float mx = *std::max_element(x, x + n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace clef::engine::cpu

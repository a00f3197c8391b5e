// Element-wise and row-wise float32 building blocks shared by the backbone and the joint head.
#pragma once

#include <cmath>
#include <cstddef>

namespace clef::engine::cpu {

inline float sigmoidf(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
inline float siluf(float x) {
  return x / (1.0f + std::exp(-x));
}
// PyTorch softplus (beta 1, threshold 20): linear above the threshold.
inline float softplusf(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}
// Exact (erf) GELU, as torch.nn.GELU() / F.gelu default.
inline float gelu_erff(float x) {
  return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
}

// Tanh-approximate GELU, as torch's gelu(approximate="tanh") ("gelu_pytorch_tanh").
inline float gelu_tanhf(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

// Qwen RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w), per row of n. w = nullptr means no weight.
void rms_norm_1p(const float* x, const float* w, float eps, size_t rows, size_t n, float* y);
// PyTorch LayerNorm over rows of n (biased variance), weight and bias.
void layer_norm(const float* x, const float* w, const float* b, float eps, size_t rows, size_t n,
                float* y);
// In-place numerically stable softmax of n values.
void softmax_inplace(float* x, size_t n);

}  // namespace clef::engine::cpu

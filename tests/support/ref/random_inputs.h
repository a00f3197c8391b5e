// Random inputs for the kernel checks (tests/engine/cuda) and the workbench (dev/cuda): normal and
// uniform vectors, and rounding to bf16 so a reference sees exactly the kernel's bf16 inputs.
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

}  // namespace clef::engine::ref

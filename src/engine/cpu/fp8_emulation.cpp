#include "engine/cpu/fp8_emulation.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "model/bf16.h"
#include "model/fp8.h"

namespace clef::engine::cpu {

namespace {

// One scale for the n x m values at v (row stride ld), then each value -> code * scale.
void emulate_block(float* v, int rows, int cols, int ld) {
  float amax = 0.0f;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(v[size_t(r) * ld + c]));
  const float s = model::fp8_block_scale(amax);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      float& x = v[size_t(r) * ld + c];
      x = model::e4m3_to_float(model::float_to_e4m3(x / s)) * s;
    }
}

}  // namespace

void fp8_emulate_rows(float* x, int rows, int cols, int ld) {
  constexpr int B = model::kFp8Block;
  for (int t = 0; t < rows; ++t) {
    float* row = x + size_t(t) * ld;
    for (int c = 0; c < cols; ++c) row[c] = model::bf16_to_float(model::float_to_bf16(row[c]));
    for (int c0 = 0; c0 < cols; c0 += B) emulate_block(row + c0, 1, std::min(B, cols - c0), ld);
  }
}

void fp8_emulate_weight_blocks(float* w, int n, int k) {
  constexpr int B = model::kFp8Block;
  for (int r0 = 0; r0 < n; r0 += B)
    for (int c0 = 0; c0 < k; c0 += B)
      emulate_block(w + size_t(r0) * k + c0, std::min(B, n - r0), std::min(B, k - c0), k);
}

}  // namespace clef::engine::cpu

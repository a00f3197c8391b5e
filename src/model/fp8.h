// Bit-exact conversions between float and OCP FP8 E4M3 ("e4m3fn": bias 7, no infinities, one NaN
// pattern S.1111.111, largest finite 448), as stored in HF fine-grained FP8 checkpoints.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace clef::model {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr int kFp8Block = 128;  // HF fine-grained FP8: 128x128 weight blocks

// scale_inv of a block (HF semantics: dequantised = e4m3 * scale_inv; codes = e4m3(x / scale_inv)):
// amax / 448, and 1 for an all-zero block (its codes are all 0 either way).
inline float fp8_block_scale(float amax) {
  return amax > 0.0f ? amax / kE4m3Max : 1.0f;
}

inline float e4m3_to_float(uint8_t code) {
  const int exp = (code >> 3) & 0xf, mant = code & 7;
  float v;
  if (exp == 0xf && mant == 7) {
    v = std::nanf("");
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant/8 * 2^-6
  } else {
    v = std::ldexp(static_cast<float>(8 + mant), exp - 10);  // (1 + mant/8) * 2^(exp-7)
  }
  return (code & 0x80) ? -v : v;
}

// Round-to-nearest-even, saturating: every finite input (and ±inf) gives a finite code, |x| above
// 448 gives ±448; NaN gives the NaN code. Integer arithmetic only (no dependence on the FP
// rounding mode).
inline uint8_t float_to_e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7f);  // NaN
  const int exp = static_cast<int>(u >> 23) - 127;
  if (exp == -127) return sign;  // float zero or subnormal (< 2^-126): far below 2^-10
  const uint32_t sig = (u & 0x7fffffu) | 0x800000u;  // 24-bit significand, value sig * 2^(exp-23)
  uint32_t code, rem, half;
  if (exp >= -6) {  // normal in e4m3 (or too large): keep 3 mantissa bits
    if (exp > 8) return static_cast<uint8_t>(sign | 0x7e);
    code = (static_cast<uint32_t>(exp + 7) << 3) | ((sig >> 20) & 7u);
    rem = sig & 0xfffffu;
    half = 0x80000u;
  } else {  // subnormal in e4m3: code = round(|f| * 2^9); 8 is the smallest normal's code
    const int shift = 14 - exp;  // >= 21
    if (shift >= 32) return sign;
    code = sig >> shift;
    rem = sig & ((1u << shift) - 1u);
    half = 1u << (shift - 1);
  }
  if (rem > half || (rem == half && (code & 1u))) ++code;  // a carry moves to the next binade
  if (code > 0x7eu) code = 0x7eu;                          // saturate (0x7f would be NaN)
  return static_cast<uint8_t>(sign | code);
}

}  // namespace clef::model

// Element types of device tensors: activations (bf16 | fp32) and weights (bf16 | fp32, FP8 e4m3
// with block scales to come) are chosen separately.
#pragma once

#include <cstddef>

namespace clef::engine::cuda {

enum class DataType { F32 = 0, BF16 = 1, F8_E4M3 = 2 };

inline size_t data_type_bytes(DataType t) {
  return t == DataType::F32 ? 4 : t == DataType::BF16 ? 2 : 1;
}
inline const char* data_type_name(DataType t) {
  return t == DataType::F32 ? "float32" : t == DataType::BF16 ? "bfloat16" : "float8_e4m3";
}

}  // namespace clef::engine::cuda

// Host staging of weights for the device, by the loading rule (bf16-rounded unless the release
// keeps fp32): one conversion for the backbone's uploader (weights.cpp) and the vision tower's.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/data_type.h"
#include "model/release.h"

namespace clef::engine::cuda {

// Host bytes of one device tensor in a given element type (F32 or BF16), filled part by part
// (fused projections append their parts).
class Staging {
 public:
  // Throws std::runtime_error for an element type other than F32 or BF16.
  explicit Staging(DataType t);
  // Appends tensor t as the engine must use it (bf16 values copied as stored).
  void append(const model::Tensor& t);
  // Appends n float values, bf16-rounded unless the type is F32.
  void append(const float* v, size_t n);
  size_t elems() const { return elems_; }
  DataType type() const { return type_; }
  const unsigned char* data() const { return bytes_.data(); }
  size_t bytes() const { return bytes_.size(); }

 private:
  // Writes m floats at element `at` (already allocated).
  void put_floats(const float* v, size_t m, size_t at);

  DataType type_;
  std::vector<unsigned char> bytes_;
  size_t elems_ = 0;
};

// A device copy of `bytes` host bytes; at least one byte is allocated, so an empty tensor still
// has an address.
DeviceBuffer device_copy(const void* src, size_t bytes);

}  // namespace clef::engine::cuda

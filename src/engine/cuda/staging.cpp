#include "engine/cuda/staging.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "model/bf16.h"

namespace clef::engine::cuda {

Staging::Staging(DataType t) : type_(t) {
  if (t != DataType::F32 && t != DataType::BF16)
    throw std::runtime_error(std::string("cuda engine: weights in ") + data_type_name(t) +
                             " are not supported yet");
}

void Staging::append(const model::Tensor& t) {
  const size_t n = t.numel(), es = data_type_bytes(type_), off = bytes_.size();
  bytes_.resize(off + n * es);
  if (type_ == DataType::BF16 && t.dtype == model::DType::BF16) {
    std::memcpy(bytes_.data() + off, t.data, n * 2);
  } else {
    // Converted in bounded chunks: a large tensor never needs a full float copy.
    std::vector<float> tmp(std::min<size_t>(n, 1 << 22));
    for (size_t i = 0; i < n; i += tmp.size()) {
      const size_t m = std::min(tmp.size(), n - i);
      t.to_float(tmp.data(), i, m);
      put_floats(tmp.data(), m, elems_ + i);
    }
  }
  elems_ += n;
}

void Staging::append(const float* v, size_t n) {
  bytes_.resize(bytes_.size() + n * data_type_bytes(type_));
  put_floats(v, n, elems_);
  elems_ += n;
}

void Staging::put_floats(const float* v, size_t m, size_t at) {
  if (m == 0) return;  // v may be null then
  unsigned char* dst = bytes_.data() + at * data_type_bytes(type_);
  if (type_ == DataType::F32) {
    std::memcpy(dst, v, m * 4);
  } else {
    for (size_t j = 0; j < m; ++j) {
      const uint16_t b = model::float_to_bf16(v[j]);
      std::memcpy(dst + 2 * j, &b, 2);
    }
  }
}

DeviceBuffer device_copy(const void* src, size_t bytes) {
  DeviceBuffer b(std::max<size_t>(bytes, 1));
  CLEF_CUDA_CHECK(cudaMemcpy(b.get(), src, bytes, cudaMemcpyHostToDevice));
  return b;
}

}  // namespace clef::engine::cuda

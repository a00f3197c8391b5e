// DType names/sizes and the Tensor element accessors (release.h): convert from the stored dtype on
// read, applying the bf16 loading rule to wider float types.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "model/bf16.h"
#include "model/fp8.h"
#include "model/release.h"

namespace clef::model {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::I64:
      return "I64";
    case DType::I32:
      return "I32";
    case DType::U8:
      return "U8";
    case DType::BOOL:
      return "BOOL";
    case DType::F8_E4M3:
      return "F8_E4M3";
  }
  return "?";
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::BF16:
    case DType::F16:
      return 2;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::U8:
    case DType::BOOL:
    case DType::F8_E4M3:
      return 1;
  }
  return 1;
}

size_t Tensor::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // the data may be unaligned (odd header lengths are legal)
  return v;
}

// An F8_E4M3 tensor's scales, or a clear error (the loader attaches them; a bare view has none).
const BlockScales& fp8_scales(const Tensor& t) {
  if (!t.scales || t.shape.size() != 2)
    throw std::runtime_error("tensor " + t.name + ": F8_E4M3 data without block scales");
  return *t.scales;
}

}  // namespace

float BlockScales::at(int64_t block_row, int64_t block_col) const {
  const uint8_t* p = data + static_cast<size_t>(block_row * cols + block_col) * dtype_size(dtype);
  return dtype == DType::BF16 ? bf16_to_float(load<uint16_t>(p)) : load<float>(p);
}

float Tensor::at(size_t i) const {
  const uint8_t* p = data + i * dtype_size(dtype);
  switch (dtype) {
    case DType::BF16:
      return bf16_to_float(load<uint16_t>(p));
    case DType::F16: {
      float f = f16_to_float(load<uint16_t>(p));
      return round_to_bf16 ? model::round_to_bf16(f) : f;
    }
    case DType::F32: {
      float f = load<float>(p);
      return round_to_bf16 ? model::round_to_bf16(f) : f;
    }
    case DType::F64: {
      float f = static_cast<float>(load<double>(p));
      return round_to_bf16 ? model::round_to_bf16(f) : f;
    }
    case DType::I64:
      return static_cast<float>(load<int64_t>(p));
    case DType::I32:
      return static_cast<float>(load<int32_t>(p));
    case DType::U8:
      return static_cast<float>(*p);
    case DType::BOOL:
      return *p ? 1.0f : 0.0f;
    case DType::F8_E4M3: {
      const BlockScales& s = fp8_scales(*this);
      const size_t in = static_cast<size_t>(shape[1]);
      return e4m3_to_float(*p) *
             s.at(static_cast<int64_t>(i / in / s.block), static_cast<int64_t>(i % in / s.block));
    }
  }
  return 0.0f;
}

void Tensor::to_float(float* out, size_t offset, size_t n) const {
  size_t total = numel();
  if (offset > total || n > total - offset) {
    throw std::out_of_range("tensor " + name + ": elements [" + std::to_string(offset) + ", " +
                            std::to_string(offset + n) + ") out of range " + std::to_string(total));
  }
  if (dtype == DType::BF16) {  // the hot case: no per-element switch
    const uint8_t* p = data + offset * 2;
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(load<uint16_t>(p + 2 * i));
    return;
  }
  if (dtype == DType::F8_E4M3) {  // per row: one scale lookup per block of columns
    const BlockScales& s = fp8_scales(*this);
    const size_t in = static_cast<size_t>(shape[1]), blk = static_cast<size_t>(s.block);
    for (size_t i = 0; i < n;) {
      const size_t e = offset + i, r = e / in, c = e % in;
      const size_t stop = std::min(n - i, std::min(in - c, blk - c % blk));
      const float scale = s.at(static_cast<int64_t>(r / blk), static_cast<int64_t>(c / blk));
      for (size_t k = 0; k < stop; ++k) out[i + k] = e4m3_to_float(data[e + k]) * scale;
      i += stop;
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = at(offset + i);
}

std::vector<float> Tensor::to_float() const {
  std::vector<float> v(numel());
  to_float(v.data(), 0, v.size());
  return v;
}

}  // namespace clef::model

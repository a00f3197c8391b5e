// libFuzzer over the safetensors header parser: any input must either parse into in-bounds tensor
// views or throw LoadError; never crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = clef::model::SafetensorsFile::parse(data, size, "fuzz.safetensors");
    for (const clef::model::Tensor& t : f->tensors()) {
      if (t.nbytes != t.numel() * clef::model::dtype_size(t.dtype)) std::abort();
      if (t.data < data || t.data + t.nbytes > data + size) std::abort();
      if (t.numel() > 0) {
        volatile float first = t.at(0);
        volatile float last = t.at(t.numel() - 1);
        (void)first;
        (void)last;
      }
      if (f->find(t.name) != &t) std::abort();
    }
  } catch (const clef::model::LoadError&) {
  }
  return 0;
}

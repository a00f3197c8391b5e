// Safetensors files: a checked reader (memory-mapped, every header field validated so that a
// truncated or corrupt file gives a LoadError naming the file and tensor, never a crash) and a
// streaming writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/release.h"

namespace clef::model {

std::optional<DType> parse_dtype(std::string_view name);

class SafetensorsFile {
 public:
  // Memory-maps `path` read-only and parses its header. Throws LoadError naming the file (and
  // tensor).
  static std::shared_ptr<const SafetensorsFile> open(const std::string& path);
  // Parses a whole file image held in memory (not copied: `bytes` must outlive the result). `path`
  // is only used in error messages. This is what the fuzzer drives.
  static std::shared_ptr<const SafetensorsFile> parse(const uint8_t* bytes, size_t size,
                                                      const std::string& path);

  const std::string& path() const { return path_; }
  // Tensors in data-offset order, named as in the file; `file` is the path; round_to_bf16 is true.
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const Tensor* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  void* map_ = nullptr;  // mmap base (nullptr for parse())
  size_t map_size_ = 0;
};

// What the writer needs to know about one tensor before its bytes exist.
struct TensorSpec {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
  size_t nbytes() const;
};

// Fills dst with bytes [byte_offset, byte_offset + n) of tensor `index`'s data.
using TensorFill = std::function<void(size_t index, size_t byte_offset, uint8_t* dst, size_t n)>;

// Writes a safetensors file (tensors in the given order; header padded so the data is 8-byte
// aligned) without holding more than two chunks in memory: `fill` produces one chunk while the
// previous is written. Throws std::runtime_error on I/O errors.
void write_safetensors(const std::string& path, const std::vector<TensorSpec>& specs,
                       const std::map<std::string, std::string>& metadata, const TensorFill& fill,
                       size_t chunk_bytes = size_t{64} << 20);

// Convenience: tensors whose bytes are already in memory (Tensor::data / nbytes).
void write_safetensors(const std::string& path, const std::vector<Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace clef::model

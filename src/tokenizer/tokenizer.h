// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (docs/spec/model.md §5): NFC
// normalizer, Split(regex, Isolated) + ByteLevel pre-tokenizer, BPE merges, added tokens matched
// first in raw text. Nothing model-specific is hard-coded: everything comes from the file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace clef::tokenizer {

class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Tokenizer {
 public:
  // path: a tokenizer.json file, or a folder holding one. Throws TokenizerError with the reason.
  static Tokenizer load(const std::string& path);
  static Tokenizer from_json(std::string_view tokenizer_json);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Like HF tokenizer(text, add_special_tokens=False).input_ids. Throws TokenizerError on invalid
  // UTF-8. Thread-safe (the merge cache is internally synchronised or per-thread).
  std::vector<int32_t> encode(std::string_view utf8) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  size_t vocab_size() const;  // max id + 1 over the model vocab and the added tokens
  // Empties the per-word merge cache (results never depend on it; for cold-start measurements).
  void clear_cache() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace clef::tokenizer

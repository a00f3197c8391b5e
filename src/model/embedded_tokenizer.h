// The default tokenizer for `make-model` (tests/golden/tokenizers/tiny-bpe), embedded at build time
// by cmake/embed.cmake so that a fresh install can generate a demo model without data files.
#pragma once

#include <cstddef>
#include <string_view>

namespace clef::model::embedded {

extern const unsigned char tiny_bpe_tokenizer_json[];
extern const size_t tiny_bpe_tokenizer_json_size;
extern const unsigned char tiny_bpe_tokenizer_config_json[];
extern const size_t tiny_bpe_tokenizer_config_json_size;

inline std::string_view tokenizer_json() {
  return {reinterpret_cast<const char*>(tiny_bpe_tokenizer_json), tiny_bpe_tokenizer_json_size};
}
inline std::string_view tokenizer_config_json() {
  return {reinterpret_cast<const char*>(tiny_bpe_tokenizer_config_json),
          tiny_bpe_tokenizer_config_json_size};
}

}  // namespace clef::model::embedded

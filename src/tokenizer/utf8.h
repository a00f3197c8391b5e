// UTF-8 helpers: strict validation, code point iteration and Rust-compatible lossy decoding.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace clef::tokenizer::utf8 {

inline constexpr size_t npos = static_cast<size_t>(-1);

// Byte offset of the first invalid sequence (overlong forms, surrogates and values above U+10FFFF
// are invalid), or npos when the whole text is valid UTF-8.
size_t find_invalid(std::string_view text);

// Decodes the code point starting at text[pos] of VALID UTF-8 and sets len to its byte length.
inline char32_t decode(std::string_view text, size_t pos, size_t& len) {
  auto b = static_cast<unsigned char>(text[pos]);
  if (b < 0x80) {
    len = 1;
    return b;
  }
  auto c = [&](size_t i) {
    return static_cast<char32_t>(static_cast<unsigned char>(text[pos + i]) & 0x3F);
  };
  if (b < 0xE0) {
    len = 2;
    return (static_cast<char32_t>(b & 0x1F) << 6) | c(1);
  }
  if (b < 0xF0) {
    len = 3;
    return (static_cast<char32_t>(b & 0x0F) << 12) | (c(1) << 6) | c(2);
  }
  len = 4;
  return (static_cast<char32_t>(b & 0x07) << 18) | (c(1) << 12) | (c(2) << 6) | c(3);
}

// Byte length of the code point that starts with lead byte b (valid UTF-8 assumed).
inline size_t sequence_length(unsigned char b) {
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

void append(std::string& out, char32_t cp);

// Like Rust's String::from_utf8_lossy (what HF decoders use): each maximal invalid subpart becomes
// U+FFFD.
std::string lossy(std::string_view bytes);

}  // namespace clef::tokenizer::utf8

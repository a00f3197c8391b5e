// The GPT-2 byte <-> unicode map of HF's ByteLevel pre-tokenizer and decoder: printable Latin-1
// bytes map to themselves, the other 68 bytes to U+0100.. in byte order.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace clef::tokenizer {

class ByteLevelMap {
 public:
  ByteLevelMap();
  char32_t to_char(unsigned char b) const { return byte_to_char_[b]; }
  // UTF-8 of the mapped char, for building vocab keys.
  const std::string& to_utf8(unsigned char b) const { return byte_to_utf8_[b]; }
  // Maps raw bytes to the byte-level string that vocab entries are written in.
  std::string encode(std::string_view bytes) const;
  // Reverse map; nullopt when the char is not one of the 256 mapped chars.
  std::optional<unsigned char> to_byte(char32_t c) const {
    if (c < char_to_byte_.size() && char_to_byte_[c] >= 0)
      return static_cast<unsigned char>(char_to_byte_[c]);
    return std::nullopt;
  }

 private:
  std::array<char32_t, 256> byte_to_char_{};
  std::array<std::string, 256> byte_to_utf8_{};
  std::array<short, 324> char_to_byte_{};
};

}  // namespace clef::tokenizer

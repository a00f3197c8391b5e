#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace clef::tokenizer {

ByteLevelMap::ByteLevelMap() {
  char_to_byte_.fill(-1);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    char32_t c = printable ? static_cast<char32_t>(b) : next++;
    byte_to_char_[b] = c;
    char_to_byte_[c] = static_cast<short>(b);
    utf8::append(byte_to_utf8_[b], c);
  }
}

std::string ByteLevelMap::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) out += byte_to_utf8_[static_cast<unsigned char>(ch)];
  return out;
}

}  // namespace clef::tokenizer

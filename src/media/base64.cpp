#include <array>

#include "media/image.h"

namespace clef::media {

std::vector<uint8_t> base64_decode(std::string_view text) {
  static const std::array<int8_t, 256> kValue = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  // The fast path's tables: symbol value pre-shifted for its place in a group of four, bit 31 for
  // anything that is not an alphabet symbol (so one OR tells a clean group).
  static const std::array<std::array<uint32_t, 256>, 4> kShifted = [] {
    std::array<std::array<uint32_t, 256>, 4> t{};
    for (int place = 0; place < 4; ++place)
      for (int c = 0; c < 256; ++c)
        t[place][c] =
            kValue[c] < 0 ? 0x80000000u : static_cast<uint32_t>(kValue[c]) << (18 - 6 * place);
    return t;
  }();
  // Sized for the most bytes `text` can hold (3 per 4 symbols, +3 for a partial group), written
  // through a pointer and trimmed at the end: no per-byte capacity checks.
  const size_t n = text.size();
  std::vector<uint8_t> out(n / 4 * 3 + 3);
  uint8_t* o = out.data();
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0, symbols = 0;
  for (size_t i = 0; i < n; ++i) {
    // Whole groups of four alphabet symbols at a time (the common case: megabytes of media); a
    // group holding whitespace, '=' or anything else goes through the checks below one by one.
    if (bits == 0 && pad == 0) {
      const size_t start = i;
      const auto* u = reinterpret_cast<const unsigned char*>(text.data());
      while (i + 4 <= n) {
        const uint32_t v = kShifted[0][u[i]] | kShifted[1][u[i + 1]] | kShifted[2][u[i + 2]] |
                           kShifted[3][u[i + 3]];
        if (v & 0x80000000u) break;
        o[0] = static_cast<uint8_t>(v >> 16);
        o[1] = static_cast<uint8_t>(v >> 8);
        o[2] = static_cast<uint8_t>(v);
        o += 3;
        i += 4;
      }
      symbols += i - start;
    }
    if (i >= n) break;
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    const int8_t v = kValue[c];
    if (v < 0 || pad > 0)
      throw MediaError(v < 0 ? "invalid base64: unexpected character at offset " + std::to_string(i)
                             : std::string("invalid base64: data after '=' padding"));
    ++symbols;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      *o++ = static_cast<uint8_t>((acc >> bits) & 0xFF);
    }
  }
  out.resize(static_cast<size_t>(o - out.data()));
  // A final group of one symbol cannot carry a byte; padding, when present, must complete the
  // group.
  if (symbols % 4 == 1 || pad > 2 || (pad > 0 && (symbols + pad) % 4 != 0))
    throw MediaError("invalid base64: truncated or badly padded");
  return out;
}

}  // namespace clef::media

namespace clef::media {

std::string base64_encode(const std::vector<uint8_t>& bytes) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t{bytes[i]} << 16;
    if (rest == 2) v |= uint32_t{bytes[i + 1]} << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace clef::media

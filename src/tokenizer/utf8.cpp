#include "tokenizer/utf8.h"

namespace clef::tokenizer::utf8 {
namespace {

// Length of the valid prefix of the sequence at pos (0 = lead byte invalid) and whether it is
// complete. Continuation ranges follow the Unicode well-formed byte sequence table, so the prefix
// is the "maximal subpart" that Rust (and the Unicode recommendation) replace with a single U+FFFD.
struct Scan {
  size_t valid;
  bool complete;
};

Scan scan(std::string_view s, size_t pos) {
  auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) return {1, true};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {0, false};
  }
  size_t i = 1;
  for (; i < need && pos + i < s.size(); ++i) {
    auto b = static_cast<unsigned char>(s[pos + i]);
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
  }
  return {i, i == need};
}

}  // namespace

size_t find_invalid(std::string_view text) {
  size_t pos = 0;
  const size_t n = text.size();
  while (pos < n) {
    // ASCII fast path, 8 bytes at a time.
    while (pos + 8 <= n) {
      unsigned long long w = 0;
      for (int k = 0; k < 8; ++k)
        w |= static_cast<unsigned long long>(static_cast<unsigned char>(text[pos + k])) << (8 * k);
      if (w & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos >= n) break;
    Scan r = scan(text, pos);
    if (!r.complete) return pos;
    pos += r.valid;
  }
  return npos;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    Scan r = scan(bytes, pos);
    if (r.complete) {
      out.append(bytes.substr(pos, r.valid));
      pos += r.valid;
    } else {
      out.append("\xEF\xBF\xBD");
      pos += r.valid == 0 ? 1 : r.valid;
    }
  }
  return out;
}

}  // namespace clef::tokenizer::utf8

// A small strict JSON parser of our own. nlohmann::json cannot do what the reference's Python json
// does and the encoder depends on: keep integers' exact digits at any size, keep the int/float
// distinction of the source text, apply Python dict semantics to duplicate keys (last value wins at
// the first key's position), and accept lone UTF-16 surrogate escapes (flagged, so they can be
// refused with a clear error later instead of failing inside the tokenizer).
//
// Two passes over the text (value.h, "Memory"): the first checks the whole grammar and counts the
// elements of every array and object, building nothing; the second, which cannot fail, builds the
// value with containers reserved to their exact size. Peak memory is then the value itself (no
// vector growth slack, no value built for a document that turns out malformed), and both passes
// are linear in the text.
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "json/value.h"

namespace clef::json {
namespace {

class Parser {
 public:
  Parser(std::string_view text, const ParseOptions& opts) : s_(text), opts_(opts) {}

  std::optional<Value> run(ParseError* error) {
    Value v;
    build_ = false;  // pass 1: grammar and element counts
    if (!pass(v)) return fail_out(error);
    build_ = true;  // pass 2: the same text again, now known to be valid
    next_count_ = 0;
    if (!pass(v)) return fail_out(error);  // cannot happen: pass 1 accepted the same text
    return v;
  }

 private:
  bool pass(Value& v) {
    pos_ = 0;
    // Python's json.loads(bytes) strips a UTF-8 byte order mark; accepting it changes no meaning.
    if (s_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
    skip_ws();
    if (!parse_value(v, 0)) return false;
    skip_ws();
    if (pos_ != s_.size()) return fail("unexpected data after the JSON value");
    return true;
  }

  // Pass 1 records a container's element count at its opening; pass 2 reads them in the same order.
  size_t open_container() {
    if (build_) return next_count_ < counts_.size() ? counts_[next_count_++] : 0;
    counts_.push_back(0);
    return counts_.size() - 1;
  }

  std::optional<Value> fail_out(ParseError* error) {
    if (error) {
      error->offset = err_offset_;
      error->message = "invalid JSON at byte " + std::to_string(err_offset_) + ": " + err_;
    }
    return std::nullopt;
  }

  bool fail(std::string msg) {
    if (err_.empty()) {
      err_ = std::move(msg);
      err_offset_ = pos_;
    }
    return false;
  }

  void skip_ws() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return fail("invalid literal");
    pos_ += word.size();
    return true;
  }

  bool parse_value(Value& out, int depth) {
    if (pos_ >= s_.size()) return fail("unexpected end of input");
    char c = s_[pos_];
    switch (c) {
      case '{':
        return parse_object(out, depth + 1);
      case '[':
        return parse_array(out, depth + 1);
      case '"': {
        bool lone = false;
        if (!build_) {
          scratch_.clear();
          return parse_string(scratch_, lone);
        }
        std::string str;
        if (!parse_string(str, lone)) return false;
        out = Value::string(std::move(str), lone);
        return true;
      }
      case 't':
        if (!literal("true")) return false;
        if (build_) out = Value::boolean(true);
        return true;
      case 'f':
        if (!literal("false")) return false;
        if (build_) out = Value::boolean(false);
        return true;
      case 'n':
        if (!literal("null")) return false;
        if (build_) out = Value::null();
        return true;
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(out);
        if (c == 'N' || c == 'I') return fail("NaN and Infinity are not allowed");
        return fail("unexpected character");
    }
  }

  bool parse_object(Value& out, int depth) {
    if (depth > opts_.max_depth)
      return fail("nesting deeper than " + std::to_string(opts_.max_depth));
    ++pos_;                                // '{'
    const size_t slot = open_container();  // pass 1: index into counts_; pass 2: the count
    std::vector<Member>* members = nullptr;
    KeyIndex index;
    if (build_) {
      out = Value::object();
      if (slot > 0) {
        members = &out.members();
        members->reserve(slot);
        // Large objects get a key index so duplicate detection stays linear.
        if (slot > kLinearKeys) index.init(slot);
      }
    }
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return true;
    }
    Value ignored;
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a string key");
      std::string key;
      bool lone = false;
      if (!parse_string(build_ ? key : scratch_key_, lone)) return false;
      if (!build_) scratch_key_.clear();
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':'");
      ++pos_;
      skip_ws();
      if (!build_) {
        if (!parse_value(ignored, depth)) return false;
        ++counts_[slot];
      } else {
        Value v;
        if (!parse_value(v, depth)) return false;
        if (!members) {  // counts out of step: cannot happen after pass 1, but stay correct
          out.set(std::move(key), std::move(v));
        } else {
          // Python dict semantics: a repeated key keeps its first position and takes the last
          // value.
          size_t found = members->size();
          if (index.enabled()) {
            found = index.find_or_add(*members, key);
          } else {
            for (size_t i = 0; i < members->size(); ++i)
              if ((*members)[i].first == key) found = i;
          }
          if (found < members->size())
            (*members)[found].second = std::move(v);
          else
            members->emplace_back(std::move(key), std::move(v));
        }
      }
      skip_ws();
      if (pos_ >= s_.size()) return fail("unexpected end of input in object");
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == '}') {
        ++pos_;
        return true;
      }
      return fail("expected ',' or '}'");
    }
  }

  bool parse_array(Value& out, int depth) {
    if (depth > opts_.max_depth)
      return fail("nesting deeper than " + std::to_string(opts_.max_depth));
    ++pos_;                                // '['
    const size_t slot = open_container();  // pass 1: index into counts_; pass 2: the count
    std::vector<Value>* items = nullptr;
    if (build_) {
      out = Value::array();
      if (slot > 0) {
        items = &out.items();
        items->reserve(slot);
      }
    }
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return true;
    }
    Value ignored;
    while (true) {
      skip_ws();
      if (!build_) {
        if (!parse_value(ignored, depth)) return false;
        ++counts_[slot];
      } else {
        Value v;
        if (!parse_value(v, depth)) return false;
        if (items)
          items->push_back(std::move(v));
        else
          out.push_back(std::move(v));  // counts out of step: cannot happen after pass 1
      }
      skip_ws();
      if (pos_ >= s_.size()) return fail("unexpected end of input in array");
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == ']') {
        ++pos_;
        return true;
      }
      return fail("expected ',' or ']'");
    }
  }

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  bool parse_number(Value& out) {
    size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    if (pos_ >= s_.size() || !is_digit(s_[pos_])) return fail("invalid number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    }
    bool is_float = false;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (pos_ >= s_.size() || !is_digit(s_[pos_])) return fail("invalid number: digit expected");
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
      is_float = true;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || !is_digit(s_[pos_]))
        return fail("invalid number: exponent expected");
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
      is_float = true;
    }
    const std::string_view view = s_.substr(start, pos_ - start);
    if (!is_float) {
      size_t digits = view.size() - (view[0] == '-' ? 1 : 0);
      if (digits > opts_.max_int_digits) {
        pos_ = start;
        return fail("integer with more than " + std::to_string(opts_.max_int_digits) + " digits");
      }
      if (build_) {
        int64_t i = 0;
        auto [ptr, ec] = std::from_chars(view.data(), view.data() + view.size(), i);
        if (ec == std::errc() && ptr == view.data() + view.size())
          out = Value::integer(i);  // "-0" reads as 0, Python's int
        else
          out = Value::integer_text(std::string(view));  // beyond int64: the exact digits
      }
      return true;
    }
    if (!build_) return true;  // the grammar is all pass 1 checks; from_chars accepts it
    std::string text(view);
    double d = 0.0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
    if (ec == std::errc::result_out_of_range) {
      // Overflow or underflow: strtod tells them apart (underflow gives 0 or a subnormal, as
      // Python).
      errno = 0;
      d = std::strtod(text.c_str(), nullptr);
    } else if (ec != std::errc() || ptr != text.data() + text.size()) {
      pos_ = start;
      return fail("invalid number");
    }
    // An overflow (1e400) is +-inf, as Python's float() makes it: well-formed JSON, refused by
    // validation where it would be rendered (json::find_non_finite).
    out = Value::floating(d);
    return true;
  }

  bool hex4(uint32_t& out) {
    if (pos_ + 4 > s_.size()) return fail("truncated \\u escape");
    out = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_ + i];
      uint32_t d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      else
        return fail("invalid \\u escape");
      out = out * 16 + d;
    }
    pos_ += 4;
    return true;
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    // Also used for lone surrogates (WTF-8): the caller flags those.
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // One UTF-8 sequence starting at pos_ (first byte >= 0x80); strict: no overlongs, no encoded
  // surrogates, nothing above U+10FFFF.
  bool copy_utf8(std::string& out) {
    auto b = [&](size_t i) { return static_cast<unsigned char>(s_[i]); };
    unsigned char c = b(pos_);
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return fail("invalid UTF-8");
    }
    if (pos_ + len > s_.size()) return fail("invalid UTF-8 (truncated sequence)");
    if (b(pos_ + 1) < lo || b(pos_ + 1) > hi) return fail("invalid UTF-8");
    for (size_t i = 2; i < len; ++i)
      if (b(pos_ + i) < 0x80 || b(pos_ + i) > 0xBF) return fail("invalid UTF-8");
    out.append(s_.substr(pos_, len));
    pos_ += len;
    return true;
  }

  // The end of the run of plain ASCII (no '"', '\\', control or non-ASCII byte) from `pos`: eight
  // bytes a step (a media string is megabytes of base64), then byte by byte to the stop.
  static size_t plain_run_end(std::string_view s, size_t pos) {
    constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
    auto has_zero = [](uint64_t v) { return ((v - kOnes) & ~v & kHigh) != 0; };
    while (pos + 8 <= s.size()) {
      uint64_t v;
      std::memcpy(&v, s.data() + pos, 8);
      // Any byte >= 0x80, < 0x20 ((v - 0x20..) & ~v & 0x80.. is exact for "any" below 0x80), '"'
      // or '\\'.
      if ((v & kHigh) != 0 || ((v - 0x20 * kOnes) & ~v & kHigh) != 0 ||
          has_zero(v ^ (kOnes * '"')) || has_zero(v ^ (kOnes * '\\')))
        break;
      pos += 8;
    }
    while (pos < s.size()) {
      const unsigned char c = static_cast<unsigned char>(s[pos]);
      if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
      ++pos;
    }
    return pos;
  }

  bool parse_string(std::string& out, bool& lone) {
    ++pos_;  // opening quote
    while (true) {
      // Copy a run of plain ASCII in one go.
      const size_t run = plain_run_end(s_, pos_);
      out.append(s_.substr(pos_, run - pos_));
      pos_ = run;
      if (pos_ >= s_.size()) return fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return fail("control character in string");
      if (c >= 0x80) {
        if (!copy_utf8(out)) return false;
        continue;
      }
      // Backslash escape.
      ++pos_;
      if (pos_ >= s_.size()) return fail("unterminated string");
      char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp;
          if (!hex4(cp)) return false;
          // A high surrogate followed by an escaped low surrogate is one astral code point
          // (Python).
          if (cp >= 0xD800 && cp <= 0xDBFF && pos_ + 6 <= s_.size() && s_[pos_] == '\\' &&
              s_[pos_ + 1] == 'u') {
            size_t save = pos_;
            pos_ += 2;
            uint32_t low;
            if (!hex4(low)) return false;
            if (low >= 0xDC00 && low <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else {
              pos_ = save;  // the next escape is handled on its own
            }
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) lone = true;
          put_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          return fail("invalid escape");
      }
    }
  }

  // Open addressing over member indices (no per-key node), for objects of more than kLinearKeys
  // members: 4 bytes per slot, load at most 1/2.
  static constexpr size_t kLinearKeys = 16;
  class KeyIndex {
   public:
    bool enabled() const { return !slots_.empty(); }
    void init(size_t expected) {
      size_t n = 16;
      while (n < 2 * expected) n *= 2;
      slots_.assign(n, 0);
    }
    // The index of `key` in `members`, or members.size() after recording that it will be
    // appended there.
    size_t find_or_add(const std::vector<Member>& members, const std::string& key) {
      if (2 * (used_ + 1) > slots_.size()) grow(members);
      const size_t mask = slots_.size() - 1;
      for (size_t h = std::hash<std::string>{}(key)&mask;; h = (h + 1) & mask) {
        const uint32_t s = slots_[h];
        if (s == 0) {
          slots_[h] = static_cast<uint32_t>(members.size() + 1);
          ++used_;
          return members.size();
        }
        if (members[s - 1].first == key) return s - 1;
      }
    }

   private:
    void grow(const std::vector<Member>& members) {
      std::vector<uint32_t> old;
      old.swap(slots_);
      slots_.assign(old.size() * 2, 0);
      const size_t mask = slots_.size() - 1;
      for (uint32_t s : old) {
        if (s == 0) continue;
        size_t h = std::hash<std::string>{}(members[s - 1].first) & mask;
        while (slots_[h] != 0) h = (h + 1) & mask;
        slots_[h] = s;
      }
    }
    std::vector<uint32_t> slots_;
    size_t used_ = 0;
  };

  std::string_view s_;
  const ParseOptions& opts_;
  bool build_ = false;
  std::vector<uint32_t> counts_;  // elements of each array / object, in order of opening
  size_t next_count_ = 0;
  std::string scratch_, scratch_key_;  // pass 1's strings (checked, then dropped)
  size_t pos_ = 0;
  std::string err_;
  size_t err_offset_ = 0;
};

}  // namespace

std::optional<Value> parse(std::string_view text, ParseError* error, const ParseOptions& opts) {
  Parser p(text, opts);
  return p.run(error);
}

}  // namespace clef::json

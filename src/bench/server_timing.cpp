#include "bench/server_timing.h"

#include <charconv>
#include <cmath>
#include <cstring>

namespace clef::bench {

namespace {

// RFC 9110 tchar.
bool is_tchar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr);
}

class Scanner {
 public:
  explicit Scanner(const std::string& s) : s_(s) {}
  bool done() const { return i_ >= s_.size(); }
  char peek() const { return done() ? '\0' : s_[i_]; }
  void next() { ++i_; }
  void skip_ows() {
    while (!done() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  std::string token() {
    const size_t b = i_;
    while (!done() && is_tchar(s_[i_])) ++i_;
    return s_.substr(b, i_ - b);
  }
  // A token or a quoted-string (backslash escapes kept out of the value); an unclosed quote runs
  // to the end of the header.
  std::string value() {
    if (peek() != '"') return token();
    next();
    std::string out;
    while (!done() && s_[i_] != '"') {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) ++i_;
      out += s_[i_++];
    }
    if (!done()) next();  // closing quote
    return out;
  }
  // Past the next comma that is not inside a quoted-string: where the next metric starts.
  void skip_metric() {
    bool quoted = false;
    while (!done()) {
      const char c = s_[i_++];
      if (quoted && c == '\\' && !done()) {
        ++i_;
      } else if (c == '"') {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        return;
      }
    }
  }

 private:
  const std::string& s_;
  size_t i_ = 0;
};

bool iequals(const std::string& a, const char* b) {
  const size_t n = std::strlen(b);
  if (a.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    const char x = (a[i] >= 'A' && a[i] <= 'Z') ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    if (x != b[i]) return false;
  }
  return true;
}

// The whole value as a finite, non-negative number; from_chars is locale-independent.
bool parse_duration(const std::string& v, double* out) {
  double d = 0.0;
  const char* end = v.data() + v.size();
  const auto [ptr, ec] = std::from_chars(v.data(), end, d);
  if (ec != std::errc() || ptr != end || !std::isfinite(d) || d < 0.0) return false;
  *out = d;
  return true;
}

}  // namespace

std::map<std::string, double> parse_server_timing(const std::string& header) {
  std::map<std::string, double> out;
  Scanner sc(header);
  while (!sc.done()) {
    sc.skip_ows();
    if (sc.peek() == ',') {  // empty list element
      sc.next();
      continue;
    }
    const std::string name = sc.token();
    if (name.empty()) {
      sc.skip_metric();
      continue;
    }
    bool have_dur = false, bad = false;
    double dur = 0.0;
    for (;;) {
      sc.skip_ows();
      if (sc.done() || sc.peek() == ',') break;
      if (sc.peek() != ';') {
        bad = true;
        break;
      }
      sc.next();
      sc.skip_ows();
      const std::string param = sc.token();
      sc.skip_ows();
      std::string value;
      if (sc.peek() == '=') {
        sc.next();
        sc.skip_ows();
        value = sc.value();
      }
      if (param.empty()) {
        bad = true;
        break;
      }
      // Only the first dur counts (the spec ignores repeated parameters).
      if (iequals(param, "dur") && !have_dur) {
        have_dur = true;
        if (!parse_duration(value, &dur)) bad = true;
      }
    }
    if (!bad && have_dur) out.emplace(name, dur);
    sc.skip_metric();
  }
  return out;
}

}  // namespace clef::bench

// Python's float repr and round(x, n), needed so that rendered requests and answers match the
// reference byte for byte.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "json/value.h"

namespace clef::json {

std::string python_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // Shortest round-trip digits (the same digits Python's repr picks), taken apart and laid out the
  // way Python does: positional when -4 <= exponent < 16, else d.ddde+XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::atoi(sci.c_str() + epos + 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    out += 'e';
    out += exp < 0 ? '-' : '+';
    int a = exp < 0 ? -exp : exp;
    if (a < 10) out += '0';
    out += std::to_string(a);
  } else if (exp >= 0) {
    size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_len) {
      out += digits;
      out.append(int_len - digits.size(), '0');
      out += ".0";
    } else {
      out.append(digits, 0, int_len);
      out += '.';
      out.append(digits, int_len, std::string::npos);
    }
  } else {
    out += "0.";
    out.append(static_cast<size_t>(-exp - 1), '0');
    out += digits;
  }
  return out;
}

double python_round(double x, int ndigits) {
  if (!std::isfinite(x) || x == 0.0) return x;
  // Beyond 330 decimals every double is already exact (Python returns x too).
  if (ndigits > 330) return x;
  if (ndigits < 0) throw std::invalid_argument("python_round: negative ndigits are not supported");
  // to_chars with a precision is exact (like glibc printf): it rounds the exact binary value, and
  // an exact tie goes to the even digit, which is Python's rule. Parsing back gives the nearest
  // double, as Python's round does. |x| < 1.8e308 has at most 309 integer digits.
  char buf[700];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed, ndigits);
  if (res.ec != std::errc()) return x;
  double out = 0.0;
  std::from_chars(buf, res.ptr, out);
  // Python keeps the sign of zero: round(-0.00001, 4) == -0.0.
  if (out == 0.0) return std::signbit(x) ? -0.0 : 0.0;
  return out;
}

}  // namespace clef::json

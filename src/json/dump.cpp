// Serialisation as Python's json.dumps writes it (ensure_ascii=False, compact separators).
#include <algorithm>
#include <cmath>
#include <string>

#include "json/value.h"

namespace clef::json {
namespace {

void dump_string(std::string& out, const std::string& s) {
  out += '"';
  static const char* hex = "0123456789abcdef";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xF];
        } else {
          out += ch;  // non-ASCII raw, '/' and U+2028 unescaped (ensure_ascii=False)
        }
    }
  }
  out += '"';
}

// json.dumps writes non-finite floats as these (non-standard) literals.
std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(d);
}

void dump(std::string& out, const Value& v, bool sorted) {
  switch (v.kind()) {
    case Kind::Null:
      out += "null";
      return;
    case Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Kind::Int:
      out += v.int_text();
      return;
    case Kind::Float:
      out += json_float(v.as_double());
      return;
    case Kind::String:
      dump_string(out, v.as_string());
      return;
    case Kind::Array: {
      out += '[';
      bool first = true;
      for (const auto& item : v.items()) {
        if (!first) out += ',';
        first = false;
        dump(out, item, sorted);
      }
      out += ']';
      return;
    }
    case Kind::Object: {
      out += '{';
      std::vector<const Member*> members;
      members.reserve(v.members().size());
      for (const auto& m : v.members()) members.push_back(&m);
      // UTF-8 (and WTF-8 for lone surrogates) byte order is code point order, which is how Python
      // sorts str keys.
      if (sorted)
        std::sort(members.begin(), members.end(),
                  [](const Member* a, const Member* b) { return a->first < b->first; });
      bool first = true;
      for (const Member* m : members) {
        if (!first) out += ',';
        first = false;
        dump_string(out, m->first);
        out += ':';
        dump(out, m->second, sorted);
      }
      out += '}';
      return;
    }
  }
}

}  // namespace

std::string dumps_python_sorted(const Value& v) {
  std::string out;
  dump(out, v, true);
  return out;
}

std::string dumps(const Value& v) {
  std::string out;
  dump(out, v, false);
  return out;
}

}  // namespace clef::json

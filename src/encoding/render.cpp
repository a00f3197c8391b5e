#include "encoding/render.h"

namespace clef::encoding {

std::string render(const json::Value& v) {
  if (v.is_string()) return v.as_string();
  return json::dumps_python_sorted(v);
}

std::string render_option(const std::string& id, const json::Value& description) {
  json::Value obj = json::Value::object();
  obj.set("option_id", json::Value::string(id));
  if (!description.is_null()) obj.set("description", description);
  return json::dumps_python_sorted(obj);
}

bool has_surrogate_bytes(std::string_view s) {
  for (size_t i = 0; i + 1 < s.size(); ++i)
    if (static_cast<unsigned char>(s[i]) == 0xED && static_cast<unsigned char>(s[i + 1]) >= 0xA0)
      return true;
  return false;
}

std::string escape_surrogates(std::string_view s) {
  if (!has_surrogate_bytes(s)) return std::string(s);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    if (b(i) == 0xED && i + 2 < s.size() && b(i + 1) >= 0xA0) {
      const unsigned cp = 0xD000u | ((b(i + 1) & 0x3Fu) << 6) | (b(i + 2) & 0x3Fu);
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += hex[(cp >> shift) & 0xF];
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

size_t count_code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

}  // namespace clef::encoding

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

size_t count_code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

}  // namespace clef::encoding

#include "media/data_uri.h"

#include <cstring>
#include <string>

#include "media/image.h"

namespace clef::media {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

}  // namespace

std::vector<uint8_t> media_string_bytes(std::string_view text,
                                        std::initializer_list<const char*> accepted,
                                        const char* kind, const char* expected) {
  std::string_view payload = text;
  const std::string head = lower(text.substr(0, 64));
  if (head.rfind("data:", 0) == 0) {
    const size_t comma = text.find(',');
    if (comma == std::string_view::npos) throw MediaError("data URI without a ',' before its data");
    const std::string meta = lower(text.substr(5, comma - 5));
    bool ok = false;
    for (const char* a : accepted) ok = ok || meta == a;
    if (!ok)
      throw MediaError("unsupported data URI \"data:" + meta.substr(0, 40) + "\": expected " +
                       expected);
    payload = text.substr(comma + 1);
  } else if (const size_t colon = head.find(':'); colon != std::string::npos) {
    // ':' is not in the base64 alphabet: this is a URL (http, https, file, ...), never fetched.
    throw MediaError(std::string(kind) + " URLs are not supported (\"" + head.substr(0, colon) +
                     ":\"): send the file as a data URI or raw base64");
  }
  if (payload.empty()) throw MediaError(std::string("empty ") + kind);
  return base64_decode(payload);
}

bool has_magic(const std::vector<uint8_t>& b, const char* magic, size_t n, size_t at) {
  return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
}

}  // namespace clef::media

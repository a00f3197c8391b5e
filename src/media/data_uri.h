// A request's media string (docs/spec/media.md §1), images and videos alike: a data URI of an
// accepted type or raw base64 -> the file's bytes. URLs (anything else with a ':' — not in the
// base64 alphabet) are refused, never fetched.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

namespace clef::media {

// `accepted`: the lowercase "<mime>;base64" forms taken; `kind` ("image", "video") and
// `expected` (e.g. "data:image/{png,jpeg,jpg,webp};base64,") name them in the MediaError.
std::vector<uint8_t> media_string_bytes(std::string_view text,
                                        std::initializer_list<const char*> accepted,
                                        const char* kind, const char* expected);

// b[at, at + n) == magic (a file format's signature).
bool has_magic(const std::vector<uint8_t>& b, const char* magic, size_t n, size_t at = 0);

}  // namespace clef::media

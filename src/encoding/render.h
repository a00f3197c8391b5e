// Text rendering of request values, exactly as the reference's render() (docs/spec/encoding.md §1,
// §3).
#pragma once

#include <string>
#include <string_view>

#include "json/value.h"

namespace clef::encoding {

// A JSON string renders as its raw text; anything else as Python's compact sorted json.dumps.
std::string render(const json::Value& v);

// The rendered option object: {"description":DESC,"option_id":"ID"} (description left out when
// null).
std::string render_option(const std::string& id, const json::Value& description);

// True when the bytes hold a WTF-8 encoded UTF-16 surrogate (only the parser's lone "\udXXX"
// escapes produce these; the parser refuses them in raw UTF-8).
bool has_surrogate_bytes(std::string_view s);

// The text with every WTF-8 encoded surrogate written as a "\udXXX" escape, so that error messages
// and locations quoting request text stay valid UTF-8.
std::string escape_surrogates(std::string_view s);

// Number of Unicode code points in valid UTF-8.
size_t count_code_points(std::string_view s);

}  // namespace clef::encoding

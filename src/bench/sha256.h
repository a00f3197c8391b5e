// SHA-256 of bytes as lowercase hex (the manifest's fingerprint in the report's evidence).
#pragma once

#include <string>
#include <string_view>

namespace clef::bench {

std::string sha256_hex(std::string_view bytes);

}  // namespace clef::bench

// The OpenAPI 3.1 description of every endpoint the server answers (docs/spec/protocol.md), served
// at GET /openapi.json.
#pragma once

#include <string>

namespace clef::server {

// api_key: whether the server requires a bearer key (adds the security requirement); ui: whether
// the playground (/ and /ui/{asset}) is served (without it, those paths are left out).
std::string openapi_document(const std::string& version, bool api_key, bool ui = true);

}  // namespace clef::server

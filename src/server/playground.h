// The playground page at GET / (docs/api.md, "GET /"): one self-contained page whose HTML, script,
// style sheet and icon are compiled into the binary (cmake/embed.cmake, src/server/playground/).
// Every answer carries a strict Content-Security-Policy: the page loads nothing and talks to
// nothing but its own origin. `clefserve serve --no-ui` turns all of it off (404).
#pragma once

#include <string_view>

#include "server/http_util.h"

namespace clef::server::detail {

// The playground's paths: "/" (the page) and "/ui/<asset>" (app.js, style.css, icon.svg); the
// query is not part of `path`.
bool is_ui_path(std::string_view path);
// The Content-Security-Policy of every playground answer.
extern const char* const kPlaygroundCsp;
// The answer to GET/HEAD `target` (a playground path, query allowed): 200 with the bytes, their
// Content-Type, the security headers and caching (the page: no-cache; an asset asked for with its
// content hash, `?v=<hash>`, as the page links it: immutable for a year; otherwise no-cache).
Reply playground_reply(std::string_view target);

}  // namespace clef::server::detail

// The media limit flags shared by `serve`, `decide` and `encode` (--max-images, --max-image-pixels,
// --max-videos, --max-video-frames; docs/spec/media.md §1), declared once.
#pragma once

#include <CLI/CLI.hpp>

#include "encoding/request.h"

namespace clef::cli {

// Adds the flags to `cmd`, parsed into `limits` (which must outlive the parse); the values in
// `limits` when this is called are the defaults --help shows.
void add_media_limit_options(CLI::App* cmd, encoding::Limits& limits);

}  // namespace clef::cli

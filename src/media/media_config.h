// What the encoder needs from a release to lay out images and videos (docs/spec/media.md §3, §6):
// the vision token ids (config.json) and the processor's pixel budgets (processor_config.json).
#pragma once

#include <cstdint>
#include <string>

#include "media/geometry.h"

namespace clef::media {

struct VisionTokens {
  int32_t image_pad = -1;     // image_token_id
  int32_t video_pad = -1;     // video_token_id
  int32_t vision_start = -1;  // vision_start_token_id
  int32_t vision_end = -1;    // vision_end_token_id
  bool valid() const {
    return image_pad >= 0 && video_pad >= 0 && vision_start >= 0 && vision_end >= 0;
  }
};

struct MediaConfig {
  VisionTokens tokens;  // invalid: the release has no vision tokens (media requests refused)
  PixelBudget image = kImageBudget;
  PixelBudget video = kVideoBudget;
};

// Reads `dir`/config.json and `dir`/processor_config.json when present (a folder without them, or
// a path that is not a folder, gives no tokens and the spec's default budgets). Throws
// std::runtime_error when a present file is malformed.
MediaConfig load_media_config(const std::string& dir);

}  // namespace clef::media

// The media block of a request (docs/spec/media.md §5-6), internal to the encoder: planned from the
// files' headers (token counts known before any pixel is decoded), rendered after the length check.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "encoding/encode.h"
#include "encoding/request.h"
#include "media/processor.h"

namespace clef::encoding {

// A run of pad tokens that one grid fills (an image, or one temporal group of a video).
struct PadRun {
  size_t start = 0;        // index in MediaBlock::ids
  int rows = 0, cols = 0;  // merged grid (h/2, w/2)
};

struct MediaBlock {
  std::vector<int32_t> ids;    // every image, then every video, then one "\n"
  std::vector<uint8_t> types;  // mm_token_type_ids of `ids`
  std::vector<PadRun> runs;
  std::vector<media::ImagePlan> images;
  std::vector<media::VideoPlan> videos;
};

// Tokenizes a text piece (with the encoder's checks); loc names the field for errors.
using TokenizePiece =
    std::function<const std::vector<int32_t>&(const std::string&, const std::vector<std::string>&)>;

// Throws RequestError (422) naming the image or video.
MediaBlock plan_media(const ValidatedRequest& req, const EncodeOptions& opts,
                      const TokenizePiece& tokenize);

// Decodes, resizes and patchifies every planned image and video into `out`.
void render_media(const MediaBlock& block, const EncodeOptions& opts, media::VisualInput& out);

// get_rope_index: [3][T] positions of `ids` where the block starts at `offset`.
std::vector<int32_t> rope_positions(size_t total, size_t offset, const MediaBlock& block);

}  // namespace clef::encoding

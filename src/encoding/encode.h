// Request -> token ids + spans, exactly as the reference's encode_record (docs/spec/encoding.md
// §3-4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "encoding/request.h"
#include "media/media_config.h"
#include "media/visual_input.h"
#include "tokenizer/tokenizer.h"

namespace clef::encoding {

struct Span {
  int32_t start = 0;  // half-open [start, end), absolute positions in input_ids
  int32_t end = 0;
};

struct EncodedQuestion {
  std::string id;
  QuestionType type = QuestionType::Noul;
  Span question_span;
  std::vector<Span> option_spans;       // model order
  std::vector<std::string> option_ids;  // model order
};

struct EncodedRequest {
  std::vector<int32_t> input_ids;
  std::vector<EncodedQuestion> questions;  // request order
  int32_t state_tokens = 0;                // state tokens kept
  int32_t truncated_state_tokens = 0;      // state tokens cut (truncation "allow")
  // Images and videos (docs/spec/media.md). All empty for a text-only request, whose rotary
  // position is its index (p, p, p) and whose token types are all 0.
  media::VisualInput visual;
  int32_t media_token_offset = 0;          // where the media block starts (the prefix length)
  int32_t media_tokens = 0;                // its length (images, videos, the "\n" after them)
  std::vector<uint8_t> mm_token_type_ids;  // size T when media: 1 image pad, 2 video pad, else 0
  std::vector<int32_t> position_ids;       // 3*T when media: [3][T] (temporal, height, width)
  bool has_media() const { return !visual.empty(); }
};

// Input tokens a request may have unless the front-end says otherwise (--max-length); also the
// server's default tokens per batched forward pass and the length engines prepare for.
inline constexpr int32_t kDefaultMaxLength = 16384;

struct EncodeOptions {
  int32_t max_length = kDefaultMaxLength;
  Truncation truncation = Truncation::Error;  // default when the request does not say
  // Images and videos: the release's vision token ids and pixel budgets (media::load_media_config),
  // and the decoded-size limit (Limits::max_image_pixels, --max-image-pixels).
  media::MediaConfig media;
  uint64_t max_image_pixels = Limits{}.max_image_pixels;
  // Video files (the data form), checked from their headers and packets before decoding.
  size_t max_video_frames = Limits{}.max_video_frames;
  double max_video_seconds = Limits{}.max_video_seconds;
};

// Throws RequestError: schema_too_long, state_too_long (with token counts), lone surrogates, empty
// spans, and 422 for media that cannot be decoded or sized (docs/spec/media.md).
EncodedRequest encode_request(const ValidatedRequest& req, const tokenizer::Tokenizer& tok,
                              const EncodeOptions& opts);

// The fixtures' "expected" format: {"input_ids", "questions": [{"id","type","question_span",...}]};
// with media also media_token_offset, mm_token_type_ids (from the offset on), image_grid_thw /
// video_grid_thw, pixel_values / pixel_values_videos as {shape, sha256_f32le}, position_ids [3][T].
json::Value encoded_to_json(const EncodedRequest& enc);

}  // namespace clef::encoding

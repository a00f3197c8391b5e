// Validated System One request (docs/spec/encoding.md §2, §5; docs/spec/protocol.md "Request").
// validate_request performs the reference's checks in the reference's order plus this project's
// limits, and throws RequestError naming the field (FastAPI-style loc) on the first failure.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "json/value.h"

namespace clef::encoding {

// One FastAPI-style validation failure: loc like {"body", "questions", "q1", "criteria"}.
struct FieldError {
  std::vector<std::string> loc;
  std::string msg;
  std::string type;  // machine-readable kind, e.g. "missing", "value_error", "state_too_long"
};

class RequestError : public std::runtime_error {
 public:
  explicit RequestError(FieldError e, int http_status = 422)
      : std::runtime_error(e.msg), error(std::move(e)), status(http_status) {}
  FieldError error;
  int status;  // 422 validation; 400 body not an object; 404 model not served
};

enum class QuestionType { Noul = 0, Choice = 1, Score = 2 };
const char* question_type_name(QuestionType t);

enum class Truncation { Error, Allow };

struct Option {
  std::string id;
  json::Value description;  // null = no description (key left out of the rendered option)
};

struct Question {
  std::string id;
  QuestionType type = QuestionType::Noul;
  json::Value instructions;           // as sent (may be null / absent -> null)
  std::vector<Option> options;        // MODEL order (choice: keys sorted by code point)
  std::vector<size_t> request_order;  // indices into `options`, in the request's key order
  json::Value criteria;               // as sent (score legend uses it unchanged)
};

// One entry of `videos` (docs/spec/media.md §1): its frames as image strings, and the source
// frame rate when the client knows it.
struct VideoInput {
  std::vector<std::string> frames;
  std::optional<double> fps;
  std::optional<std::string> data;  // the data form: an MP4 / Matroska / WebM file (frames empty)
};

// `media_kwargs`, the subset of the processor's kwargs clefserve accepts.
struct MediaKwargs {
  bool fps_null = false;                          // "fps": null (then num_frames may be given)
  std::optional<double> fps;                      // target sampling rate (default 2)
  std::optional<int> num_frames;                  // only with fps_null
  std::optional<int64_t> min_pixels, max_pixels;  // both or neither (images)
};

struct ValidatedRequest {
  std::string model;
  json::Value state;
  std::vector<Question> questions;       // request order
  std::optional<Truncation> truncation;  // the request's own "truncation", if given
  std::vector<std::string> images;       // request order; data URIs or raw base64
  std::vector<VideoInput> videos;
  MediaKwargs media_kwargs;
  bool has_media() const { return !images.empty() || !videos.empty(); }
};

struct Limits {
  size_t max_questions = 64;
  size_t max_options_per_question = 255;
  size_t max_options_per_request = 2048;
  size_t max_question_id_chars = 256;    // code points
  size_t max_images = 8;                 // per request (--max-images)
  uint64_t max_image_pixels = 16777216;  // decoded width x height, each image or frame
  size_t max_videos = 2;                 // per request (--max-videos)
  size_t max_video_frames = 768;         // per video, before sampling (--max-video-frames)
  double max_video_seconds = 600;        // duration of a video file (--max-video-seconds)
};

ValidatedRequest validate_request(const json::Value& body, const Limits& limits = {});

}  // namespace clef::encoding

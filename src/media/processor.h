// The reference processor's path for one image or one frame-video (docs/spec/media.md §1-5), in two
// steps so that a request can be sized (tokens) from the files' headers before any pixel is
// decoded: plan_* parses, probes and sizes; render_* decodes and resizes into the request's frames
// (VisualInput::frames; media::pixel_rows normalises and patchifies them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "media/decode_video.h"
#include "media/geometry.h"
#include "media/image.h"
#include "media/visual_input.h"

namespace clef::media {

struct ImagePlan {
  EncodedImage file;
  Size source;
  Size target;
  Grid grid;  // {1, h'/16, w'/16}
};

// Throws MediaError (bad string or file, over max_pixels, aspect ratio above 200).
ImagePlan plan_image(std::string_view text, const PixelBudget& budget, uint64_t max_pixels);
// Appends the image's one resized frame (frame_bytes(plan.grid) bytes; it stands for both
// temporal slices) to `frames`. Throws MediaError. `decode_threads`: the decode's thread budget
// (decode_image; render_media gives each of its images threads_per_item).
void render_image(const ImagePlan& plan, uint64_t max_pixels, std::vector<uint8_t>& frames,
                  unsigned decode_threads = 1);
// The same frame written at `frame`, which holds exactly frame_bytes(plan.grid) bytes.
void render_image_into(const ImagePlan& plan, uint64_t max_pixels, uint8_t* frame,
                       unsigned decode_threads = 1);

struct VideoPlan {
  std::vector<EncodedImage> frames;  // every frame of the request, in order (the frames form)
  std::optional<EncodedVideo> file;  // or the video file (the data form)
  VideoLimits file_limits;           // what the file was probed against
  std::vector<int> sampled;        // indices into frames, in order (an odd count repeats the last)
  std::vector<double> timestamps;  // seconds, one per temporal group
  Size source;
  Size target;
  Grid grid;  // {groups, h'/16, w'/16}
};

// `source_fps`: the request's fps (nullopt: the processor's 24). Throws MediaError (a bad frame,
// frames of different sizes, fewer than 2 sampled frames, aspect ratio above 200).
VideoPlan plan_video(const std::vector<std::string>& frames, std::optional<double> source_fps,
                     const Sampling& sampling, const PixelBudget& budget, uint64_t max_pixels);
// The data form: an MP4 or Matroska/WebM file (parse_video_string), probed against `limits`
// (nothing decoded); its packets play the role of the frame list and its average frame rate the
// role of the frames form's fps, through the same sampling and sizing.
VideoPlan plan_video_file(std::string_view data, const Sampling& sampling,
                          const PixelBudget& budget, const VideoLimits& limits);
// Appends the video's 2 x plan.grid.t resized frames, in temporal order (plan.sampled), to
// `frames`. Throws MediaError.
void render_video(const VideoPlan& plan, uint64_t max_pixels, std::vector<uint8_t>& frames);

// Decode + resize only (what the fixtures keep as `case{N}_image{K}`): RGB HWC at plan.target.
std::vector<uint8_t> resized_image(const ImagePlan& plan, uint64_t max_pixels,
                                   unsigned decode_threads = 1);

inline constexpr double kDefaultSourceFps = 24.0;

}  // namespace clef::media

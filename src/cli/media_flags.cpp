#include "cli/media_flags.h"

namespace clef::cli {

void add_media_limit_options(CLI::App* cmd, encoding::Limits& limits) {
  cmd->add_option("--max-images", limits.max_images, "Images per request (0 = none accepted)")
      ->capture_default_str();
  cmd->add_option("--max-image-pixels", limits.max_image_pixels,
                  "Decoded width x height of an image or video frame, checked from its header")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-videos", limits.max_videos, "Videos per request (0 = none accepted)")
      ->capture_default_str();
  cmd->add_option("--max-video-frames", limits.max_video_frames,
                  "Frames per video, before sampling")
      ->check(CLI::Range(2, 100000))
      ->capture_default_str();
  cmd->add_option("--max-video-seconds", limits.max_video_seconds,
                  "Duration of a video file (the data form), checked before decoding")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

}  // namespace clef::cli

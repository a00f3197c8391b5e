// The processor's sizing rules (docs/spec/media.md §3, §5): smart_resize for images and videos and
// the video frame sampling, in double precision with Python's round-half-to-even.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace clef::media {

inline constexpr int kFactor = 32;  // patch 16 x merge 2
inline constexpr int kTemporalPatch = 2;

// Python's round(): half to even.
double round_half_even(double x);

struct Size {
  int height = 0;
  int width = 0;
};

struct PixelBudget {
  int64_t min_pixels = 0;
  int64_t max_pixels = 0;
};
inline constexpr PixelBudget kImageBudget{65536, 16777216};
inline constexpr PixelBudget kVideoBudget{4096, 25165824};

// Qwen2-VL image smart_resize. Throws MediaError when max(h,w)/min(h,w) > 200.
Size smart_resize_image(int height, int width, const PixelBudget& budget);

// Qwen3-VL video smart_resize for `frames` sampled frames (the budget applies to t'*h'*w'). Throws
// MediaError for fewer than 2 frames or an aspect ratio above 200.
Size smart_resize_video(int frames, int height, int width, const PixelBudget& budget);

// Which of a video's `total` frames the processor keeps (§5): with a target fps (default 2),
// int(total / source_fps * fps) clamped to [4, 768] and to total; or exactly `num_frames`.
// Indices are numpy linspace(0, total-1, n) rounded half to even.
struct Sampling {
  std::optional<double> target_fps = 2.0;  // nullopt = "fps": null
  std::optional<int> num_frames;           // only with target_fps nullopt
};
inline constexpr int kMinFrames = 4;
inline constexpr int kMaxFrames = 768;
std::vector<int> sample_frames(int total, double source_fps, const Sampling& s);

// The per-group timestamps (seconds): the mean of each temporal pair's frame times, the last
// index repeated when the count is odd.
std::vector<double> group_timestamps(const std::vector<int>& indices, double source_fps);

}  // namespace clef::media

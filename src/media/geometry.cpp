#include "media/geometry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "media/image.h"

namespace clef::media {
namespace {

// Python's repr of a float for the aspect-ratio message ("250.0"): shortest round-trip digits.
std::string py_float(double x) {
  char buf[400];
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed);
  std::string s(buf, r.ptr);
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

void check_aspect(double height, double width) {
  const double ratio = std::max(height, width) / std::min(height, width);
  if (ratio > 200)
    throw MediaError("absolute aspect ratio must be smaller than 200, got " + py_float(ratio));
}

// h_bar, w_bar for `count` frames (1 for images) under the budget; shared by images and videos.
Size fit(double height, double width, double count, double t_bar, const PixelBudget& b) {
  const double f = kFactor;
  double h_bar = round_half_even(height / f) * f;
  double w_bar = round_half_even(width / f) * f;
  if (t_bar * h_bar * w_bar > static_cast<double>(b.max_pixels)) {
    const double beta = std::sqrt((count * height * width) / static_cast<double>(b.max_pixels));
    h_bar = std::max(f, std::floor(height / beta / f) * f);
    w_bar = std::max(f, std::floor(width / beta / f) * f);
  } else if (t_bar * h_bar * w_bar < static_cast<double>(b.min_pixels)) {
    const double beta = std::sqrt(static_cast<double>(b.min_pixels) / (count * height * width));
    h_bar = std::ceil(height * beta / f) * f;
    w_bar = std::ceil(width * beta / f) * f;
  }
  if (!(h_bar >= f && w_bar >= f && h_bar < 1e9 && w_bar < 1e9))
    throw MediaError("cannot size the image within the pixel budget");
  return {static_cast<int>(h_bar), static_cast<int>(w_bar)};
}

}  // namespace

double round_half_even(double x) {
  const double f = std::floor(x);
  const double d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0.0 ? f : f + 1;
}

Size smart_resize_image(int height, int width, const PixelBudget& budget) {
  check_aspect(height, width);
  return fit(height, width, 1, 1, budget);
}

Size smart_resize_video(int frames, int height, int width, const PixelBudget& budget) {
  if (frames < kTemporalPatch)
    throw MediaError("t:" + std::to_string(frames) + " must be larger than temporal_factor:" +
                     std::to_string(kTemporalPatch) + " (a video needs at least 2 frames)");
  double h = height, w = width;
  if (h < kFactor || w < kFactor) {
    // Small frames are scaled up first, truncated to whole pixels as Python's int() does.
    const double scale = std::max(kFactor / h, kFactor / w);
    h = std::trunc(h * scale);
    w = std::trunc(w * scale);
  }
  check_aspect(h, w);
  const double t_bar =
      round_half_even(static_cast<double>(frames) / kTemporalPatch) * kTemporalPatch;
  return fit(h, w, frames, t_bar, budget);
}

std::vector<int> sample_frames(int total, double source_fps, const Sampling& s) {
  int n = 0;
  if (s.num_frames) {
    n = *s.num_frames;
  } else {
    const double fps = s.target_fps.value_or(2.0);
    const double want = std::trunc(static_cast<double>(total) / source_fps * fps);
    n = want > kMaxFrames ? kMaxFrames : static_cast<int>(want);
    n = std::min({std::max(n, kMinFrames), kMaxFrames, total});
  }
  std::vector<int> idx;
  if (n <= 0) return idx;
  if (n == 1) return {0};
  const double step = static_cast<double>(total - 1) / static_cast<double>(n - 1);
  for (int i = 0; i < n; ++i) {
    // numpy sets the last sample to `stop` exactly.
    const double v = i == n - 1 ? static_cast<double>(total - 1) : static_cast<double>(i) * step;
    idx.push_back(static_cast<int>(round_half_even(v)));
  }
  return idx;
}

std::vector<double> group_timestamps(const std::vector<int>& indices, double source_fps) {
  std::vector<int> padded = indices;
  while (!padded.empty() && padded.size() % kTemporalPatch != 0) padded.push_back(padded.back());
  std::vector<double> out;
  for (size_t i = 0; i + 1 < padded.size(); i += kTemporalPatch) {
    const double a = padded[i] / source_fps;
    const double b = padded[i + kTemporalPatch - 1] / source_fps;
    out.push_back((a + b) / 2);
  }
  return out;
}

}  // namespace clef::media

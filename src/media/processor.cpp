#include "media/processor.h"

#include <cmath>

#include "media/patchify.h"
#include "media/resize.h"

namespace clef::media {
namespace {

Grid grid_of(int frames, const Size& s) {
  return {static_cast<int32_t>((frames + kTemporalPatch - 1) / kTemporalPatch), s.height / 16,
          s.width / 16};
}

}  // namespace

ImagePlan plan_image(std::string_view text, const PixelBudget& budget, uint64_t max_pixels) {
  ImagePlan p;
  p.file = parse_image_string(text);
  const ImageInfo info = probe_image(p.file, max_pixels);
  p.source = {info.height, info.width};
  p.target = smart_resize_image(info.height, info.width, budget);
  p.grid = grid_of(1, p.target);
  return p;
}

std::vector<uint8_t> resized_image(const ImagePlan& plan, uint64_t max_pixels) {
  const Image img = decode_image(plan.file, max_pixels);
  if (img.height != plan.source.height || img.width != plan.source.width)
    throw MediaError("image size differs from its header");
  return resize_bicubic_aa(img.rgb.data(), img.height, img.width, plan.target.height,
                           plan.target.width);
}

void render_image(const ImagePlan& plan, uint64_t max_pixels, std::vector<float>& out) {
  const std::vector<uint8_t> rgb = resized_image(plan, max_pixels);
  patchify({rgb.data(), rgb.data()}, plan.target.height, plan.target.width, out);
}

VideoPlan plan_video(const std::vector<std::string>& frames, std::optional<double> source_fps,
                     const Sampling& sampling, const PixelBudget& budget, uint64_t max_pixels) {
  VideoPlan p;
  for (size_t i = 0; i < frames.size(); ++i) {
    try {
      p.frames.push_back(parse_image_string(frames[i]));
      const ImageInfo info = probe_image(p.frames.back(), max_pixels);
      const Size s{info.height, info.width};
      if (i == 0) p.source = s;
      if (s.height != p.source.height || s.width != p.source.width)
        throw MediaError("is " + std::to_string(s.width) + "x" + std::to_string(s.height) +
                         " but frame 0 is " + std::to_string(p.source.width) + "x" +
                         std::to_string(p.source.height) + ": a video's frames share one size");
    } catch (const MediaError& e) {
      throw MediaError("frame " + std::to_string(i) + ": " + e.what());
    }
  }
  const double fps = source_fps.value_or(kDefaultSourceFps);
  p.sampled = sample_frames(static_cast<int>(frames.size()), fps, sampling);
  const int n = static_cast<int>(p.sampled.size());
  p.target = smart_resize_video(n, p.source.height, p.source.width, budget);
  p.timestamps = group_timestamps(p.sampled, fps);
  p.grid = grid_of(n, p.target);
  if (n % kTemporalPatch != 0) p.sampled.push_back(p.sampled.back());
  return p;
}

void render_video(const VideoPlan& plan, uint64_t max_pixels, std::vector<float>& out) {
  // Decode and resize each distinct sampled frame once, keeping only the resized copies.
  std::vector<std::vector<uint8_t>> resized(plan.frames.size());
  std::vector<const uint8_t*> ptrs;
  for (int idx : plan.sampled) {
    std::vector<uint8_t>& r = resized[static_cast<size_t>(idx)];
    if (r.empty()) {
      const Image img = decode_image(plan.frames[static_cast<size_t>(idx)], max_pixels);
      if (img.height != plan.source.height || img.width != plan.source.width)
        throw MediaError("frame " + std::to_string(idx) + ": size differs from its header");
      r = resize_bicubic_aa(img.rgb.data(), img.height, img.width, plan.target.height,
                            plan.target.width);
    }
  }
  for (int idx : plan.sampled) ptrs.push_back(resized[static_cast<size_t>(idx)].data());
  patchify(ptrs, plan.target.height, plan.target.width, out);
}

}  // namespace clef::media

#include "media/processor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "media/parallel.h"
#include "media/resize.h"

namespace clef::media {
namespace {

Grid grid_of(int frames, const Size& s) {
  return {static_cast<int32_t>((frames + kTemporalPatch - 1) / kTemporalPatch), s.height / 16,
          s.width / 16};
}

// What both video forms share: sampling (§5), one size for all frames (§3), timestamps.
void size_video(VideoPlan& p, int total, double fps, const Sampling& sampling,
                const PixelBudget& budget) {
  p.sampled = sample_frames(total, fps, sampling);
  const int n = static_cast<int>(p.sampled.size());
  p.target = smart_resize_video(n, p.source.height, p.source.width, budget);
  p.timestamps = group_timestamps(p.sampled, fps);
  p.grid = grid_of(n, p.target);
  if (n % kTemporalPatch != 0) p.sampled.push_back(p.sampled.back());
}

// A decoded frame's pixels at the target size: its own buffer when it is already there (the
// resize would be an exact copy).
std::vector<uint8_t> at_target(Image img, const Size& target) {
  if (img.height == target.height && img.width == target.width) return std::move(img.rgb);
  return resize_bicubic_aa(img.rgb.data(), img.height, img.width, target.height, target.width);
}

// The plan's file decoded, its size held to the header's (what the plan was sized from).
Image decoded(const ImagePlan& plan, uint64_t max_pixels, unsigned threads) {
  Image img = decode_image(plan.file, max_pixels, threads);
  if (img.height != plan.source.height || img.width != plan.source.width)
    throw MediaError("image size differs from its header");
  return img;
}

// The sampled frames (a repeated index repeats its frame) appended in order: 2 per temporal group.
void append_frames(const std::vector<const uint8_t*>& sampled, const VideoPlan& plan,
                   std::vector<uint8_t>& frames) {
  const size_t bytes = static_cast<size_t>(frame_bytes(plan.grid));
  if (sampled.size() != static_cast<size_t>(plan.grid.t) * kVideoFramesPerGroup)
    throw MediaError("the sampled frames do not fill the video's temporal groups");
  const size_t base = frames.size();
  frames.resize(base + sampled.size() * bytes);
  for (size_t i = 0; i < sampled.size(); ++i)
    std::memcpy(frames.data() + base + i * bytes, sampled[i], bytes);
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

std::vector<uint8_t> resized_image(const ImagePlan& plan, uint64_t max_pixels,
                                   unsigned decode_threads) {
  return at_target(decoded(plan, max_pixels, decode_threads), plan.target);
}

void render_image(const ImagePlan& plan, uint64_t max_pixels, std::vector<uint8_t>& frames,
                  unsigned decode_threads) {
  const size_t base = frames.size();
  frames.resize(base + static_cast<size_t>(frame_bytes(plan.grid)));
  render_image_into(plan, max_pixels, frames.data() + base, decode_threads);
}

void render_image_into(const ImagePlan& plan, uint64_t max_pixels, uint8_t* frame,
                       unsigned decode_threads) {
  if (plan.source.height == plan.target.height && plan.source.width == plan.target.width) {
    // Already at the target size (a 1024 x 1024 photo): decoded straight into the frame.
    decode_image_into(plan.file, max_pixels, frame, static_cast<size_t>(frame_bytes(plan.grid)),
                      decode_threads);
    return;
  }
  const Image img = decoded(plan, max_pixels, decode_threads);
  // Resized straight into the request's frame.
  resize_bicubic_aa_into(img.rgb.data(), img.height, img.width, plan.target.height,
                         plan.target.width, frame);
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
  size_video(p, static_cast<int>(frames.size()), source_fps.value_or(kDefaultSourceFps), sampling,
             budget);
  return p;
}

VideoPlan plan_video_file(std::string_view data, const Sampling& sampling,
                          const PixelBudget& budget, const VideoLimits& limits) {
  VideoPlan p;
  p.file = parse_video_string(data);
  p.file_limits = limits;
  const VideoInfo info = probe_video(*p.file, limits);
  p.source = {info.height, info.width};
  size_video(p, info.frames, info.fps, sampling, budget);
  return p;
}

void render_video(const VideoPlan& plan, uint64_t max_pixels, std::vector<uint8_t>& out) {
  std::vector<const uint8_t*> ptrs;
  if (plan.file) {
    // Decode the file once, in order, keeping the distinct sampled frames; resize each once.
    std::vector<int> wanted = plan.sampled;
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    std::vector<Image> frames = decode_video_frames(*plan.file, plan.file_limits, wanted);
    std::vector<std::vector<uint8_t>> resized(frames.size());
    parallel_items(frames.size(), [&](size_t i) {
      Image& img = frames[i];
      if (img.height != plan.source.height || img.width != plan.source.width)
        throw MediaError("a decoded frame's size differs from the stream's header");
      resized[i] = at_target(std::move(img), plan.target);
    });
    for (int idx : plan.sampled) {
      const auto at = std::lower_bound(wanted.begin(), wanted.end(), idx) - wanted.begin();
      ptrs.push_back(resized[static_cast<size_t>(at)].data());
    }
    append_frames(ptrs, plan, out);
    return;
  }
  // Decode and resize each distinct sampled frame once (in parallel: frames are independent, each
  // decode gets its share of the threads), keeping only the resized copies.
  std::vector<int> distinct = plan.sampled;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<std::vector<uint8_t>> resized(plan.frames.size());
  const unsigned decode_threads = threads_per_item(distinct.size());
  parallel_items(distinct.size(), [&](size_t i) {
    const int idx = distinct[i];
    Image img = decode_image(plan.frames[static_cast<size_t>(idx)], max_pixels, decode_threads);
    if (img.height != plan.source.height || img.width != plan.source.width)
      throw MediaError("frame " + std::to_string(idx) + ": size differs from its header");
    resized[static_cast<size_t>(idx)] = at_target(std::move(img), plan.target);
  });
  for (int idx : plan.sampled) ptrs.push_back(resized[static_cast<size_t>(idx)].data());
  append_frames(ptrs, plan, out);
}

}  // namespace clef::media

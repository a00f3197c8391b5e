// libFuzzer: raw file bytes -> sniff -> probe (headers and packets) -> decode the sampled frames ->
// resize -> patchify, and the same bytes as a request string (data URI / raw base64). Invariants
// for any input: no crash, no UB, no leak, refusals only as MediaError, decoded frames exactly
// the probed size and within the pixel limit. Seeds (fuzz/corpus/video): lossless files written by
// tests/support/video_encoder.h (pattern_frames): mp4_x264rgb_2f (2 frames 16x12, 10 fps,
// libx264rgb qp 0), mkv_ffv1_3f (3 frames 16x12, 5 fps, FFV1) and webm_vp9_2f (2 frames 16x12,
// 10 fps, VP9 lossless).
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "media/decode_video.h"
#include "media/patchify.h"
#include "media/processor.h"
#include "media/visual_input.h"

namespace {

// Small enough that a fuzzed header cannot make an iteration slow.
constexpr uint64_t kMaxPixels = 1u << 16;

void check(bool ok) {
  if (!ok) std::abort();
}

clef::media::VideoLimits limits() {
  clef::media::VideoLimits l;
  l.max_pixels = kMaxPixels;
  l.max_frames = 64;
  l.max_seconds = 60;
  return l;
}

void run(const clef::media::EncodedVideo& file) {
  const clef::media::VideoInfo info = clef::media::probe_video(file, limits());
  check(info.frames >= 2 && static_cast<size_t>(info.frames) <= limits().max_frames);
  check(static_cast<uint64_t>(info.width) * static_cast<uint64_t>(info.height) <= kMaxPixels);
  const std::vector<clef::media::Image> frames =
      clef::media::decode_video_frames(file, limits(), {0, info.frames - 1});
  check(frames.size() == 2);
  for (const clef::media::Image& f : frames) {
    check(f.width == info.width && f.height == info.height);
    check(f.rgb.size() == static_cast<size_t>(f.width) * static_cast<size_t>(f.height) * 3);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    run(clef::media::identify_video(std::vector<uint8_t>(data, data + size)));
  } catch (const clef::media::MediaError&) {
  }
  try {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const clef::media::VideoPlan plan =
        clef::media::plan_video_file(text, {}, clef::media::kVideoBudget, limits());
    if (plan.grid.patches() <= 4096) {
      clef::media::VisualInput visual;
      clef::media::render_video(plan, kMaxPixels, visual.frames);
      visual.video_grids = {plan.grid};
      check(static_cast<int64_t>(visual.frames.size()) == clef::media::frames_bytes(visual));
      const std::vector<float> rows = clef::media::pixel_rows(visual);
      check(rows.size() == static_cast<size_t>(plan.grid.patches()) * clef::media::kPatchValues);
    }
  } catch (const clef::media::MediaError&) {
  }
  return 0;
}

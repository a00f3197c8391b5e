// VisualInput's uint8 frames -> float patch rows (media::pixel_rows) against the representation
// they replaced: the rows patchify made of each grid's frame list (an image's frame twice, a
// video's sampled frames in order) appended image by image, then video by video.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "media/check_visual_input.h"
#include "media/image.h"
#include "media/patchify.h"
#include "media/processor.h"
#include "media/resize.h"

namespace {

namespace media = clef::media;

std::vector<uint8_t> random_frame(std::mt19937_64& rng, int h, int w) {
  std::vector<uint8_t> f(static_cast<size_t>(h) * w * 3);
  for (uint8_t& x : f) x = static_cast<uint8_t>(rng() & 255u);
  return f;
}

// Two images (one of a single merge block) and a video of 2 temporal groups of distinct frames.
TEST(PixelRows, FramesGiveTheRowsPatchifyMadeOfEachGrid) {
  std::mt19937_64 rng(std::random_device{}());
  const auto a = random_frame(rng, 64, 96), b = random_frame(rng, 32, 32);
  std::vector<std::vector<uint8_t>> v;
  for (int i = 0; i < 4; ++i) v.push_back(random_frame(rng, 96, 64));

  std::vector<float> before;
  media::VisualInput in;
  in.image_grids.push_back(media::patchify({a.data(), a.data()}, 64, 96, before));
  in.image_grids.push_back(media::patchify({b.data(), b.data()}, 32, 32, before));
  in.video_grids.push_back(
      media::patchify({v[0].data(), v[1].data(), v[2].data(), v[3].data()}, 96, 64, before));
  for (const std::vector<uint8_t>* f :
       std::vector<const std::vector<uint8_t>*>{&a, &b, &v[0], &v[1], &v[2], &v[3]})
    in.frames.insert(in.frames.end(), f->begin(), f->end());
  ASSERT_EQ(in.video_grids[0].t, 2);
  ASSERT_EQ(static_cast<int64_t>(in.frames.size()), media::frames_bytes(in));
  EXPECT_EQ(media::check_visual_input(in, media::kPatchValues), 24 + 4 + 48);

  const std::vector<float> after = media::pixel_rows(in);
  ASSERT_EQ(after.size(), before.size());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin()));
  EXPECT_EQ(media::sha256_f32le(after), media::sha256_f32le(before));
  // A video's two slices are two frames: swapping them changes the rows.
  std::swap_ranges(in.frames.end() - 4 * 96 * 64 * 3, in.frames.end() - 3 * 96 * 64 * 3,
                   in.frames.end() - 3 * 96 * 64 * 3);
  EXPECT_NE(media::pixel_rows(in), before);
}

// A frames-form video of 3 sampled frames: the processor repeats the last (spec §5); render_video
// stores it as the 4th frame, and the rows are patchify's of the 4 resized frames as
// render_video used to make them (each frame decoded, resized, listed in plan.sampled order).
TEST(PixelRows, OddVideoRepeatsItsLastFrame) {
  std::vector<std::string> uris;
  for (int seed = 0; seed < 3; ++seed)
    uris.push_back(media::synthetic_image_uri(70, 50, seed + 11, media::ImageFormat::Png));
  media::Sampling s;
  s.target_fps = std::nullopt;
  s.num_frames = 3;
  const uint64_t max_pixels = 1u << 24;
  const media::VideoPlan plan =
      media::plan_video(uris, std::nullopt, s, media::kVideoBudget, max_pixels);
  ASSERT_EQ(plan.sampled, (std::vector<int>{0, 1, 2, 2}));
  ASSERT_EQ(plan.grid.t, 2);
  const int th = plan.target.height, tw = plan.target.width;
  ASSERT_FALSE(th == 50 && tw == 70);  // the resize runs

  std::vector<std::vector<uint8_t>> resized;
  for (const std::string& u : uris) {
    const media::Image img = media::decode_image(media::parse_image_string(u), max_pixels);
    resized.push_back(media::resize_bicubic_aa(img.rgb.data(), img.height, img.width, th, tw));
  }
  std::vector<const uint8_t*> ptrs;
  for (int i : plan.sampled) ptrs.push_back(resized[static_cast<size_t>(i)].data());
  std::vector<float> before;
  media::patchify(ptrs, th, tw, before);

  media::VisualInput in;
  in.video_grids.push_back(plan.grid);
  media::render_video(plan, max_pixels, in.frames);
  const size_t fb = static_cast<size_t>(media::frame_bytes(plan.grid));
  ASSERT_EQ(in.frames.size(), 4 * fb);
  EXPECT_TRUE(std::equal(in.frames.begin() + 2 * fb, in.frames.begin() + 3 * fb,
                         in.frames.begin() + 3 * fb));
  EXPECT_FALSE(std::equal(in.frames.begin(), in.frames.begin() + fb, in.frames.begin() + fb));
  EXPECT_EQ(media::pixel_rows(in), before);
}

TEST(PixelRows, RefusesFramesThatDoNotFitTheGrids) {
  media::VisualInput in;
  in.image_grids.push_back({1, 2, 2});
  in.frames.assign(32 * 32 * 3 + 1, 0);
  EXPECT_THROW(media::pixel_rows(in), std::invalid_argument);
  EXPECT_THROW(media::check_visual_input(in, media::kPatchValues), std::runtime_error);
  in.frames.pop_back();
  EXPECT_EQ(media::pixel_rows(in).size(), 4u * media::kPatchValues);
  in.video_grids.push_back({1, 2, 2});  // a video group is 2 frames
  in.frames.resize(2 * 32 * 32 * 3);
  EXPECT_THROW(media::pixel_rows(in), std::invalid_argument);
  in.frames.resize(3 * 32 * 32 * 3);
  EXPECT_EQ(media::pixel_rows(in).size(), 8u * media::kPatchValues);
  // Grids patchify does not make are refused before anything is sized from them.
  for (const media::Grid g : {media::Grid{-1, 4, 4}, media::Grid{1, 3, 4}, media::Grid{0, 2, 2}}) {
    media::VisualInput bad;
    bad.video_grids.push_back(g);
    EXPECT_THROW(media::pixel_rows(bad), std::invalid_argument) << g.t << " " << g.h;
  }
}

}  // namespace

// The processor's sizing rules (docs/spec/media.md §3, §5), expected values worked out by hand
// from the Python definitions (round() half to even, numpy linspace, math.floor/ceil).
#include "media/geometry.h"

#include <gtest/gtest.h>

#include "media/image.h"

namespace {

namespace media = clef::media;

TEST(MediaGeometry, RoundHalfToEven) {
  EXPECT_EQ(media::round_half_even(0.5), 0.0);
  EXPECT_EQ(media::round_half_even(1.5), 2.0);
  EXPECT_EQ(media::round_half_even(2.5), 2.0);
  EXPECT_EQ(media::round_half_even(8.5), 8.0);  // 272 / 32: the fixture's tie case
  EXPECT_EQ(media::round_half_even(12.5), 12.0);
  EXPECT_EQ(media::round_half_even(2.4999), 2.0);
  EXPECT_EQ(media::round_half_even(2.5001), 3.0);
}

TEST(MediaGeometry, SmartResizeImage) {
  // 272 x 400: round(8.5) = 8 -> 256, round(12.5) = 12 -> 384 (std::round would give 288 x 416).
  media::Size s = media::smart_resize_image(272, 400, media::kImageBudget);
  EXPECT_EQ(s.height, 256);
  EXPECT_EQ(s.width, 384);
  // 64 x 96 -> 64 x 96 = 6144 < 65536: beta = sqrt(65536 / 6144) = 3.266; ceil(6.53) = 7 -> 224,
  // ceil(9.80) = 10 -> 320.
  s = media::smart_resize_image(64, 96, media::kImageBudget);
  EXPECT_EQ(s.height, 224);
  EXPECT_EQ(s.width, 320);
  // Over the budget: 900 x 700 with max 65536: beta = sqrt(630000 / 65536) = 3.1005;
  // floor(9.07) = 9 -> 288, floor(7.06) = 7 -> 224.
  s = media::smart_resize_image(900, 700, {4096, 65536});
  EXPECT_EQ(s.height, 288);
  EXPECT_EQ(s.width, 224);
  // Aspect ratio: 200 is allowed, above is refused.
  EXPECT_NO_THROW(media::smart_resize_image(10, 2000, media::kImageBudget));
  EXPECT_THROW(media::smart_resize_image(10, 2001, media::kImageBudget), media::MediaError);
}

TEST(MediaGeometry, SmartResizeVideo) {
  EXPECT_THROW(media::smart_resize_video(1, 64, 64, media::kVideoBudget), media::MediaError);
  // 4 frames of 64 x 64: 4 * 64 * 64 = 16384 within [4096, 25165824]: unchanged.
  media::Size s = media::smart_resize_video(4, 64, 64, media::kVideoBudget);
  EXPECT_EQ(s.height, 64);
  EXPECT_EQ(s.width, 64);
  // 16 x 40 frames are first scaled by max(32/16, 32/40) = 2 -> 32 x 80 -> round(2.5) = 2 -> 64.
  s = media::smart_resize_video(4, 16, 40, media::kVideoBudget);
  EXPECT_EQ(s.height, 32);
  EXPECT_EQ(s.width, 64);
}

TEST(MediaGeometry, FrameSampling) {
  // 5 frames at the default 24 fps: int(5 / 24 * 2) = 0 -> at least 4; linspace(0, 4, 4) =
  // 0, 1.33, 2.67, 4.
  EXPECT_EQ(media::sample_frames(5, 24, {}), (std::vector<int>{0, 1, 3, 4}));
  // linspace(0, 9, 5) = 0, 2.25, 4.5, 6.75, 9: 4.5 rounds to 4 (half to even).
  media::Sampling five;
  five.target_fps.reset();
  five.num_frames = 5;
  EXPECT_EQ(media::sample_frames(10, 24, five), (std::vector<int>{0, 2, 4, 7, 9}));
  // 40 frames at 4 fps, target 2: int(40 / 4 * 2) = 20 frames, step 39 / 19.
  const std::vector<int> twenty = media::sample_frames(40, 4, {});
  ASSERT_EQ(twenty.size(), 20u);
  EXPECT_EQ(twenty.front(), 0);
  EXPECT_EQ(twenty[1], 2);  // 2.05
  EXPECT_EQ(twenty.back(), 39);
  // Never more than the video has, nor than 768.
  media::Sampling fast;
  fast.target_fps = 1000;
  EXPECT_EQ(media::sample_frames(6, 1, fast).size(), 6u);
  EXPECT_EQ(media::sample_frames(10000, 1, fast).size(), 768u);
  // Timestamps: the mean of each pair's times; an odd count repeats the last index.
  EXPECT_EQ(media::group_timestamps({0, 1, 3, 4}, 2), (std::vector<double>{0.25, 1.75}));
  EXPECT_EQ(media::group_timestamps({0, 2, 4}, 2), (std::vector<double>{0.5, 2.0}));
}

}  // namespace

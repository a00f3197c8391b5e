// The whole preprocessing path (decode -> smart_resize -> resize -> normalise -> patchify) against
// every fixture case: the resized uint8 images where the fixture keeps them, and the sha256 of the
// pixel values of all cases (docs/spec/media.md §8).
#include "media/processor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "json/value.h"
#include "media/patchify.h"
#include "model/safetensors.h"
#include "support/media_kwargs.h"
#include "support/parse_json.h"

namespace {

using clef::json::Value;
namespace media = clef::media;

const std::string kMedia = std::string(CLEF_SOURCE_DIR) + "/tests/golden/media/";
constexpr uint64_t kMaxPixels = 16777216;

TEST(MediaProcessor, EveryFixtureCase) {
  auto resized = clef::model::SafetensorsFile::open(kMedia + "tiny-r2m.media-resized.safetensors");
  const std::vector<Value> all = clef::testing::read_jsonl(kMedia + "encode-media-tiny-r2m.jsonl");
  ASSERT_EQ(all.size(), 24u);
  int compared_images = 0, compared_sha = 0, refusals = 0;
  for (size_t n = 0; n < all.size(); ++n) {
    const Value& request = *all[n].find("request");
    const Value& expected = *all[n].find("expected");
    SCOPED_TRACE("case " + std::to_string(n) + " " + all[n].find("label")->as_string());
    // The images' and the videos' frames apart: the fixtures hash their rows apart.
    media::VisualInput image_in, video_in;
    std::vector<media::Grid>& grids = image_in.image_grids;
    std::vector<media::Grid>& vgrids = video_in.video_grids;
    try {
      if (const Value* images = request.find("images"))
        for (size_t k = 0; k < images->items().size(); ++k) {
          const media::ImagePlan plan = media::plan_image(
              images->items()[k].as_string(), clef::testing::image_budget(request), kMaxPixels);
          grids.push_back(plan.grid);
          if (const auto* t =
                  resized->find("case" + std::to_string(n) + "_image" + std::to_string(k))) {
            const std::vector<uint8_t> got = media::resized_image(plan, kMaxPixels);
            ASSERT_EQ(t->shape[0], plan.target.height);
            ASSERT_EQ(t->shape[1], plan.target.width);
            ASSERT_EQ(got.size(), t->nbytes);
            size_t diffs = 0;
            int worst = 0;
            for (size_t i = 0; i < got.size(); ++i)
              if (got[i] != t->data[i]) {
                ++diffs;
                worst = std::max(worst, std::abs(int(got[i]) - int(t->data[i])));
              }
            EXPECT_EQ(diffs, 0u) << "resized image " << k << ": worst " << worst;
            ++compared_images;
          }
          media::render_image(plan, kMaxPixels, image_in.frames);
        }
      if (const Value* videos = request.find("videos"))
        for (const Value& v : videos->items()) {
          std::vector<std::string> frames;
          for (const Value& f : v.find("frames")->items()) frames.push_back(f.as_string());
          std::optional<double> fps;
          if (const Value* f = v.find("fps")) fps = f->as_double();
          const media::VideoPlan plan = media::plan_video(
              frames, fps, clef::testing::sampling(request), media::kVideoBudget, kMaxPixels);
          vgrids.push_back(plan.grid);
          media::render_video(plan, kMaxPixels, video_in.frames);
        }
    } catch (const media::MediaError& e) {
      ASSERT_NE(expected.find("error"), nullptr) << e.what();
      ++refusals;
      continue;
    }
    ASSERT_EQ(expected.find("error"), nullptr);
    auto grid_json = [](const std::vector<media::Grid>& g) {
      Value a = Value::array();
      for (const auto& x : g)
        a.push_back(Value::array({Value::integer(x.t), Value::integer(x.h), Value::integer(x.w)}));
      return clef::json::dumps(a);
    };
    if (const Value* e = expected.find("image_grid_thw")) {
      EXPECT_EQ(grid_json(grids), clef::json::dumps(*e));
      EXPECT_EQ(media::sha256_f32le(media::pixel_rows(image_in)),
                expected.find("pixel_values")->find("sha256_f32le")->as_string());
      ++compared_sha;
    }
    if (const Value* e = expected.find("video_grid_thw")) {
      EXPECT_EQ(grid_json(vgrids), clef::json::dumps(*e));
      EXPECT_EQ(media::sha256_f32le(media::pixel_rows(video_in)),
                expected.find("pixel_values_videos")->find("sha256_f32le")->as_string());
      ++compared_sha;
    }
  }
  EXPECT_EQ(compared_images, 18);
  EXPECT_EQ(compared_sha, 23);
  EXPECT_EQ(refusals, 2);
}

// An image already at its target size is copied from the decoded pixels, a resized one resized
// straight into its frame: both give resized_image's pixels (the fixtures' path), and
// render_image_into fills exactly its frame.
TEST(MediaProcessor, RenderIntoMatchesResizedImage) {
  for (const auto& [w, h] : {std::pair{256, 256}, std::pair{250, 262}}) {
    const std::string uri = media::synthetic_image_uri(w, h, 5, media::ImageFormat::Png);
    const media::ImagePlan plan = media::plan_image(uri, media::kImageBudget, kMaxPixels);
    EXPECT_EQ(plan.target.width == w && plan.target.height == h, w == 256) << w << "x" << h;
    const std::vector<uint8_t> expected = media::resized_image(plan, kMaxPixels);
    ASSERT_EQ(expected.size(), static_cast<size_t>(media::frame_bytes(plan.grid)));
    std::vector<uint8_t> frames(1, 3);
    media::render_image(plan, kMaxPixels, frames);
    ASSERT_EQ(frames.size(), 1 + expected.size());
    EXPECT_EQ(frames[0], 3);
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), frames.begin() + 1)) << w << "x" << h;
    std::vector<uint8_t> slice(expected.size() + 1, 5);
    media::render_image_into(plan, kMaxPixels, slice.data());
    EXPECT_EQ(slice.back(), 5);
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), slice.begin()));
  }
}

}  // namespace

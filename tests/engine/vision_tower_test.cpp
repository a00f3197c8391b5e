// The float32 vision tower against the reference's float32 tower output on tiny-r2m
// (tests/golden/models/tiny-r2m.media-vision.safetensors, cases 0-11: one image each), from the
// fixture's resized images through media::patchify (max |diff| <= 1e-5 of max |ref|); plus segment
// independence, input checks and the multimodal rotary tables.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/cpu/gated_attention.h"
#include "engine/cpu/vision_tower.h"
#include "engine/golden_models.h"
#include "media/patchify.h"
#include "model/safetensors.h"

namespace clef {
namespace {

const std::string kMedia = std::string(CLEF_SOURCE_DIR) + "/tests/golden/media/";

// The fixture's resized image of `case_n` as one image's patch rows (two identical slices).
media::VisualInput image_input(const model::SafetensorsFile& resized, int case_n) {
  const model::Tensor* img = resized.find("case" + std::to_string(case_n) + "_image0");
  if (!img || img->shape.size() != 3) throw std::runtime_error("no resized image");
  media::VisualInput v;
  const int h = static_cast<int>(img->shape[0]), w = static_cast<int>(img->shape[1]);
  v.image_grids.push_back(media::patch_grid(2, h, w));
  v.frames.assign(img->data, img->data + img->nbytes);
  return v;
}

TEST(VisionTower, MatchesReferenceFp32OnTheFixtureImages) {
  auto release = testing::load_golden_model("tiny-r2m");
  ASSERT_TRUE(release->vision.has_value());
  auto resized = model::SafetensorsFile::open(kMedia + "tiny-r2m.media-resized.safetensors");
  auto expected =
      model::SafetensorsFile::open(testing::golden_dir() + "/tiny-r2m.media-vision.safetensors");
  double worst_rel = 0;
  for (int n = 0; n <= 11; ++n) {
    SCOPED_TRACE("case " + std::to_string(n));
    const media::VisualInput in = image_input(*resized, n);
    const std::vector<float> got = engine::cpu::run_vision_tower(*release, in, 2);
    const model::Tensor* found = expected->find("case" + std::to_string(n) + "_vision_embeds");
    ASSERT_NE(found, nullptr);
    model::Tensor exact = *found;
    exact.round_to_bf16 = false;  // reference values, not weights: read them as stored
    const model::Tensor* ref = &exact;
    ASSERT_EQ(ref->shape, (std::vector<int64_t>{in.image_grids[0].tokens(), 64}));
    ASSERT_EQ(got.size(), ref->numel());
    double max_diff = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double r = ref->at(i);
      max_diff = std::max(max_diff, std::fabs(got[i] - r));
      scale = std::max(scale, std::fabs(r));
    }
    ASSERT_GT(scale, 0.0);
    worst_rel = std::max(worst_rel, max_diff / scale);
    EXPECT_LE(max_diff, 1e-5 * scale) << "max |diff| " << max_diff << " of max |ref| " << scale;
  }
  std::printf("vision tower, cases 0-11: worst max|diff| / max|ref| %.3g\n", worst_rel);
}

// Attention never crosses an image (or a video's temporal group): two images together give each
// image's rows alone, and a 2-group video's second group is its own segment.
TEST(VisionTower, SegmentsAreIndependent) {
  auto release = testing::load_golden_model("tiny-r2m");
  auto resized = model::SafetensorsFile::open(kMedia + "tiny-r2m.media-resized.safetensors");
  const media::VisualInput a = image_input(*resized, 0), b = image_input(*resized, 7);
  media::VisualInput both = a;
  both.image_grids.push_back(b.image_grids[0]);
  both.frames.insert(both.frames.end(), b.frames.begin(), b.frames.end());
  const std::vector<float> ra = engine::cpu::run_vision_tower(*release, a, 1);
  const std::vector<float> rb = engine::cpu::run_vision_tower(*release, b, 1);
  const std::vector<float> rab = engine::cpu::run_vision_tower(*release, both, 1);
  ASSERT_EQ(rab.size(), ra.size() + rb.size());
  double d = 0;
  for (size_t i = 0; i < ra.size(); ++i) d = std::max(d, std::fabs(double(rab[i]) - ra[i]));
  for (size_t i = 0; i < rb.size(); ++i)
    d = std::max(d, std::fabs(double(rab[ra.size() + i]) - rb[i]));
  EXPECT_LE(d, 1e-5);

  // The same frames as a video of 2 temporal groups (4 frames: A A B B): each group equals the
  // image alone, since a group is a segment and the position table repeats per group.
  const model::Tensor* ia = resized->find("case8_image0");   // 256 x 256
  const model::Tensor* ib = resized->find("case16_image0");  // 256 x 256
  ASSERT_TRUE(ia && ib);
  media::VisualInput video, img_a, img_b;
  video.video_grids.push_back(media::patch_grid(4, 256, 256));
  for (const model::Tensor* f : {ia, ia, ib, ib})
    video.frames.insert(video.frames.end(), f->data, f->data + f->nbytes);
  img_a.image_grids.push_back(media::patch_grid(2, 256, 256));
  img_a.frames.assign(ia->data, ia->data + ia->nbytes);
  img_b.image_grids.push_back(media::patch_grid(2, 256, 256));
  img_b.frames.assign(ib->data, ib->data + ib->nbytes);
  ASSERT_EQ(video.video_grids[0].t, 2);
  const std::vector<float> rv = engine::cpu::run_vision_tower(*release, video, 1);
  const std::vector<float> va = engine::cpu::run_vision_tower(*release, img_a, 1);
  const std::vector<float> vb = engine::cpu::run_vision_tower(*release, img_b, 1);
  ASSERT_EQ(rv.size(), va.size() + vb.size());
  d = 0;
  for (size_t i = 0; i < va.size(); ++i) d = std::max(d, std::fabs(double(rv[i]) - va[i]));
  for (size_t i = 0; i < vb.size(); ++i)
    d = std::max(d, std::fabs(double(rv[va.size() + i]) - vb[i]));
  EXPECT_LE(d, 1e-5);
}

TEST(VisionTower, RefusesInputsThatDoNotFitTheirGrids) {
  auto release = testing::load_golden_model("tiny-r2m");
  media::VisualInput v;
  v.image_grids.push_back({1, 4, 4});
  v.frames.assign(64 * 64 * 3 - 1, 0);  // one byte short
  EXPECT_THROW(engine::cpu::run_vision_tower(*release, v), std::runtime_error);
  v.image_grids[0] = {1, 3, 5};  // odd: no 2 x 2 merge
  v.frames.assign(48 * 80 * 3, 0);
  EXPECT_THROW(engine::cpu::run_vision_tower(*release, v), std::runtime_error);
  v.image_grids[0] = {0, 4, 4};
  EXPECT_THROW(engine::cpu::run_vision_tower(*release, v), std::runtime_error);
}

// The interleaved multimodal split (HF apply_interleaved_mrope): with (p, p, p) it is the text
// table bit for bit; with distinct axes, Clef-flash's [11, 11, 10] over 32 frequencies puts
// height on 1, 4, ..., 31, width on 2, 5, ..., 29 and temporal on the rest.
TEST(MultimodalRope, InterleavedSplitAndTextSpecialCase) {
  const int T = 37, rd = 64;
  std::vector<int32_t> pos(3 * T);
  for (int t = 0; t < T; ++t) pos[t] = pos[T + t] = pos[2 * T + t] = t;
  std::vector<float> c1, s1, c2, s2;
  engine::cpu::rope_tables(T, rd, 1e7, c1, s1);
  engine::cpu::mrope_tables(T, rd, 1e7, {11, 11, 10}, pos.data(), c2, s2);
  EXPECT_EQ(c1, c2);
  EXPECT_EQ(s1, s2);

  // One token at (t, h, w) = (3, 100, 2000): each frequency's angle names its axis.
  const int32_t p3[3] = {3, 100, 2000};
  engine::cpu::mrope_tables(1, rd, 1e7, {11, 11, 10}, p3, c2, s2);
  std::vector<float> ct, st;
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < rd / 2; ++i) {
    int match = -1;
    for (int a = 0; a < 3; ++a) {
      std::vector<int32_t> same = {p3[a], p3[a], p3[a]};
      engine::cpu::mrope_tables(1, rd, 1e7, {11, 11, 10}, same.data(), ct, st);
      if (ct[i] == c2[i] && st[i] == s2[i]) match = a;
    }
    const int want = (i % 3 == 1 && i < 33) ? 1 : (i % 3 == 2 && i < 30) ? 2 : 0;
    EXPECT_EQ(match, want) << "frequency " << i;
    if (match >= 0) ++counts[match];
  }
  EXPECT_EQ(counts[0], 11);
  EXPECT_EQ(counts[1], 11);
  EXPECT_EQ(counts[2], 10);
}

}  // namespace
}  // namespace clef

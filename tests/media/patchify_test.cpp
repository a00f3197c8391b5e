// patchify against the reference: the fixtures' resized uint8 images -> pixel values whose sha256
// must equal the processor's (docs/spec/media.md §4, §8).
#include "media/patchify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "json/value.h"
#include "model/safetensors.h"

namespace {

const std::string kMedia = std::string(CLEF_SOURCE_DIR) + "/tests/golden/media/";

clef::json::Value fixture_case(int n) {
  std::ifstream in(kMedia + "encode-media-tiny-r2m.jsonl");
  std::string line;
  for (int i = 0; std::getline(in, line); ++i)
    if (i == n) return *clef::json::parse(line, nullptr);
  throw std::runtime_error("no case " + std::to_string(n));
}

std::string expected_sha(int n, const char* key) {
  return fixture_case(n).find("expected")->find(key)->find("sha256_f32le")->as_string();
}

TEST(Patchify, ImagesMatchTheProcessorBitForBit) {
  auto file = clef::model::SafetensorsFile::open(kMedia + "tiny-r2m.media-resized.safetensors");
  // Case 0 (PNG 64x96 -> 224x320), case 5 (a 32x2560 strip: one merge block high), case 7 (gray).
  for (int n : {0, 5, 7}) {
    const clef::model::Tensor* t = file->find("case" + std::to_string(n) + "_image0");
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->shape.size(), 3u);
    const int h = static_cast<int>(t->shape[0]), w = static_cast<int>(t->shape[1]);
    std::vector<float> out;
    const clef::media::Grid g = clef::media::patchify({t->data, t->data}, h, w, out);
    EXPECT_EQ(g.t, 1);
    EXPECT_EQ(g.h, h / 16);
    EXPECT_EQ(g.w, w / 16);
    ASSERT_EQ(out.size(), static_cast<size_t>(g.patches()) * clef::media::kPatchValues);
    EXPECT_EQ(clef::media::sha256_f32le(out), expected_sha(n, "pixel_values")) << "case " << n;
  }
}

TEST(Patchify, AppendsAfterExistingRowsAndOrdersTheMergeBlock) {
  // 32x32, two distinct frames: one merge block of 4 patches; check value placement directly.
  std::vector<uint8_t> a(32 * 32 * 3), b(32 * 32 * 3);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<uint8_t>(i % 251);
    b[i] = static_cast<uint8_t>(255 - i % 241);
  }
  std::vector<float> out(7, 9.0f);
  const clef::media::Grid g = clef::media::patchify({a.data(), b.data()}, 32, 32, out);
  EXPECT_EQ(g.t, 1);
  EXPECT_EQ(g.h, 2);
  EXPECT_EQ(g.w, 2);
  ASSERT_EQ(out.size(), 7u + 4 * 1536);
  EXPECT_EQ(out[6], 9.0f);
  auto norm = [](uint8_t x) { return (static_cast<float>(x) - 127.5f) / 127.5f; };
  // Row 3 = (dy 1, dx 1): channel 2, temporal 1 (frame b), y 5, x 7 -> pixel (16+5, 16+7).
  const size_t at = 7 + 3 * 1536 + ((2 * 2 + 1) * 16 + 5) * 16 + 7;
  EXPECT_EQ(out[at], norm(b[((16 + 5) * 32 + 16 + 7) * 3 + 2]));
  // Row 1 = (dy 0, dx 1): channel 0, temporal 0, y 0, x 0 -> pixel (0, 16) of frame a.
  EXPECT_EQ(out[7 + 1536], norm(a[16 * 3]));
  EXPECT_EQ(norm(0), -1.0f);
  EXPECT_EQ(norm(255), 1.0f);
}

// patchify_into writes exactly the rows patchify appends, inside its slice only.
TEST(Patchify, IntoASliceMatchesAppending) {
  std::vector<uint8_t> a(64 * 96 * 3), b(64 * 96 * 3);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<uint8_t>(i * 7 % 253);
    b[i] = static_cast<uint8_t>(i / 3 % 256);
  }
  std::vector<float> appended;
  const clef::media::Grid g = clef::media::patchify({a.data(), b.data()}, 64, 96, appended);
  const clef::media::Grid pg = clef::media::patch_grid(2, 64, 96);
  EXPECT_EQ(pg.t, g.t);
  EXPECT_EQ(pg.h, g.h);
  EXPECT_EQ(pg.w, g.w);
  std::vector<float> slice(appended.size() + 2, 7.0f);
  const clef::media::Grid gi =
      clef::media::patchify_into({a.data(), b.data()}, 64, 96, slice.data() + 1);
  EXPECT_EQ(gi.patches(), g.patches());
  EXPECT_EQ(slice.front(), 7.0f);
  EXPECT_EQ(slice.back(), 7.0f);
  EXPECT_TRUE(std::equal(appended.begin(), appended.end(), slice.begin() + 1));
  EXPECT_THROW(clef::media::patch_grid(3, 64, 96), std::invalid_argument);
  EXPECT_THROW(clef::media::patch_grid(2, 64, 80), std::invalid_argument);
}

TEST(Patchify, RefusesBadShapes) {
  std::vector<uint8_t> a(32 * 32 * 3);
  std::vector<float> out;
  EXPECT_THROW(clef::media::patchify({a.data()}, 32, 32, out), std::invalid_argument);
  EXPECT_THROW(clef::media::patchify({}, 32, 32, out), std::invalid_argument);
  EXPECT_THROW(clef::media::patchify({a.data(), a.data()}, 16, 32, out), std::invalid_argument);
  EXPECT_TRUE(out.empty());
}

}  // namespace

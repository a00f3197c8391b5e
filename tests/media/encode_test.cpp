// The JPEG and WebP encoders (what `clefserve profile --media-format` sends) through our own
// decoders: dimensions exact, lossless WebP pixel for pixel, lossy files within bounds measured on
// smooth content and far below what a wrong channel order or row stride would give; the synthetic
// picture's data URIs sniff as the format they name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "media/image.h"
#include "support/lossless_round_trip.h"

namespace {

namespace media = clef::media;

constexpr uint64_t kLimit = 16777216;

// Smooth: red and green ramps of two levels a pixel, blue their mean (what a lossy codec keeps
// well, at any size: no edge for the 4:2:0 chroma to smear).
media::Image smooth(int w, int h) {
  media::Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.rgb.data() + (static_cast<size_t>(y) * w + x) * 3;
      p[0] = static_cast<uint8_t>(std::min(2 * x, 255));
      p[1] = static_cast<uint8_t>(std::min(2 * y, 255));
      p[2] = static_cast<uint8_t>((p[0] + p[1]) / 2);
    }
  return img;
}

struct Error {
  double mean = 0;
  int max = 0;
};

Error error(const media::Image& a, const media::Image& b) {
  Error e;
  long sum = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) {
    const int d = std::abs(int{a.rgb[i]} - int{b.rgb[i]});
    sum += d;
    e.max = std::max(e.max, d);
  }
  e.mean = static_cast<double>(sum) / static_cast<double>(a.rgb.size());
  return e;
}

media::Image decode(const std::vector<uint8_t>& file, media::ImageFormat want) {
  const media::EncodedImage enc = media::identify_image(file);
  EXPECT_EQ(enc.format, want);
  return media::decode_image(enc, kLimit);
}

TEST(MediaJpegEncode, RoundTripsWithinJpegError) {
  for (const auto& [w, h] : {std::pair{1, 1}, std::pair{17, 5}, std::pair{128, 96}}) {
    const media::Image img = smooth(w, h);
    const media::Image back = decode(media::encode_jpeg(img, 95), media::ImageFormat::Jpeg);
    ASSERT_EQ(back.width, w);
    ASSERT_EQ(back.height, h);
    ASSERT_EQ(back.rgb.size(), img.rgb.size());
    const Error e = error(img, back);
    EXPECT_LE(e.mean, 1.0) << w << "x" << h;  // measured 0.6 at most (17x5)
    EXPECT_LE(e.max, 4) << w << "x" << h;     // measured 2
  }
  // A lower quality loses more, yet stays an image of the same content.
  const media::Image img = smooth(128, 96);
  const Error q30 = error(img, decode(media::encode_jpeg(img, 30), media::ImageFormat::Jpeg));
  const Error q95 = error(img, decode(media::encode_jpeg(img, 95), media::ImageFormat::Jpeg));
  EXPECT_GT(q30.mean, q95.mean);
  EXPECT_LE(q30.mean, 3.0);  // measured 1.7; the inverted picture would be ~105 off
}

TEST(MediaWebpEncode, LosslessRoundTripsExactly) {
  clef::testing::expect_lossless_round_trip(
      [](const media::Image& img) { return media::encode_webp_lossless(img); },
      media::ImageFormat::Webp, kLimit);
}

TEST(MediaWebpEncode, LossyRoundTripsWithinError) {
  const media::Image img = smooth(128, 96);
  const media::Image back = decode(media::encode_webp(img, 90), media::ImageFormat::Webp);
  ASSERT_EQ(back.width, 128);
  ASSERT_EQ(back.height, 96);
  const Error e = error(img, back);
  EXPECT_LE(e.mean, 1.5);  // measured 1.0
  EXPECT_LE(e.max, 8);     // measured 5
}

TEST(MediaEncode, BadInputsRefused) {
  media::Image bad;
  bad.width = 4;
  bad.height = 4;
  bad.rgb.resize(5);
  EXPECT_THROW(media::encode_jpeg(bad, 90), media::MediaError);
  EXPECT_THROW(media::encode_webp(bad, 80), media::MediaError);
  EXPECT_THROW(media::encode_webp_lossless(bad), media::MediaError);
  const media::Image ok = smooth(8, 8);
  EXPECT_THROW(media::encode_jpeg(ok, 0), media::MediaError);
  EXPECT_THROW(media::encode_jpeg(ok, 101), media::MediaError);
  EXPECT_THROW(media::encode_webp(ok, 101), media::MediaError);
  EXPECT_THROW(media::synthetic_image(0, 4, 0), media::MediaError);
}

TEST(MediaSyntheticImage, UrisNameTheirFormatAndDecodeToThePicture) {
  const media::Image img = media::synthetic_image(96, 64, 3);
  ASSERT_EQ(img.rgb.size(), 96u * 64 * 3);
  // Deterministic, seeded, neither flat nor constant across seeds.
  EXPECT_EQ(media::synthetic_image(96, 64, 3).rgb, img.rgb);
  EXPECT_NE(media::synthetic_image(96, 64, 4).rgb, img.rgb);
  const struct {
    media::ImageFormat format;
    const char* prefix;
  } cases[] = {{media::ImageFormat::Png, "data:image/png;base64,"},
               {media::ImageFormat::Jpeg, "data:image/jpeg;base64,"},
               {media::ImageFormat::Webp, "data:image/webp;base64,"}};
  for (const auto& c : cases) {
    const std::string uri = media::synthetic_image_uri(96, 64, 3, c.format);
    EXPECT_EQ(uri.rfind(c.prefix, 0), 0u) << c.prefix;
    const media::EncodedImage enc = media::parse_image_string(uri);
    EXPECT_EQ(enc.format, c.format);
    const media::Image back = media::decode_image(enc, kLimit);
    EXPECT_EQ(back.width, 96);
    EXPECT_EQ(back.height, 64);
    if (c.format == media::ImageFormat::Png) {
      EXPECT_EQ(back.rgb, img.rgb);  // lossless
    }
  }
}

}  // namespace

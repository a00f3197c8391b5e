// Shared by the media encoder tests (PNG, lossless WebP): a picture no codec can predict, and its
// round trip through one of our encoders and back through our decoder.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "media/image.h"

namespace clef::testing {

// w x h RGB whose every byte differs from its neighbours (i * 37 + i / 7): a lossless codec must
// give it back to the bit, and a wrong channel order or row stride cannot.
inline media::Image patterned_image(int w, int h) {
  media::Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>(i * 37 + i / 7);
  return img;
}

// encode(image) -> file bytes, at 1x1, an odd 17x5 and a 64x33: the file sniffs as `format` and
// decodes (max_pixels as decode_image's) to the same size and the same pixels.
template <typename Encode>
void expect_lossless_round_trip(Encode&& encode, media::ImageFormat format, uint64_t max_pixels) {
  for (const auto& [w, h] : {std::pair{1, 1}, std::pair{17, 5}, std::pair{64, 33}}) {
    SCOPED_TRACE(::testing::Message() << w << "x" << h);
    const media::Image img = patterned_image(w, h);
    const media::EncodedImage file = media::identify_image(encode(img));
    EXPECT_EQ(file.format, format);
    const media::Image back = media::decode_image(file, max_pixels);
    EXPECT_EQ(back.width, w);
    EXPECT_EQ(back.height, h);
    EXPECT_EQ(back.rgb, img.rgb);
  }
}

}  // namespace clef::testing

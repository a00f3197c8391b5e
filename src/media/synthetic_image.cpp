// The picture `clefserve profile` and the media microbench send (one generator, so that both time
// the same files).
#include <algorithm>

#include "media/image.h"

namespace clef::media {

Image synthetic_image(int width, int height, int seed) {
  if (width <= 0 || height <= 0) throw MediaError("synthetic_image: sizes must be positive");
  Image img;
  img.width = width;
  img.height = height;
  img.rgb.resize(static_cast<size_t>(width) * height * 3);
  uint32_t state = 2166136261u ^ static_cast<uint32_t>(seed);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      state = state * 1664525u + 1013904223u;
      uint8_t* p = img.rgb.data() + (static_cast<size_t>(y) * width + x) * 3;
      p[0] = static_cast<uint8_t>((x * 255 / std::max(width - 1, 1) + seed * 37) & 255);
      p[1] = static_cast<uint8_t>((y * 255 / std::max(height - 1, 1) + (state >> 28)) & 255);
      p[2] = static_cast<uint8_t>(((x ^ y) + seed * 11 + (state >> 26)) & 255);
    }
  return img;
}

std::string synthetic_image_uri(int width, int height, int seed, ImageFormat format) {
  const Image img = synthetic_image(width, height, seed);
  switch (format) {
    case ImageFormat::Jpeg:
      return "data:image/jpeg;base64," + base64_encode(encode_jpeg(img, 90));
    case ImageFormat::Webp:
      return "data:image/webp;base64," + base64_encode(encode_webp(img, 80));
    case ImageFormat::Png:
      break;
  }
  return "data:image/png;base64," + base64_encode(encode_png(img));
}

}  // namespace clef::media

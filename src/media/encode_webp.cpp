// WebP writing via libwebp's simple encoding API (lossy at a quality, or lossless): synthetic
// request images for `clefserve profile` and the tests, decoded by the same path as a client's.
#include <webp/encode.h>

#include "media/image.h"

namespace clef::media {
namespace {

void check(const Image& img) {
  if (img.width <= 0 || img.height <= 0 || img.width > WEBP_MAX_DIMENSION ||
      img.height > WEBP_MAX_DIMENSION ||
      img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3)
    throw MediaError("encode_webp: the image is not width x height x 3 bytes (at most 16383)");
}

// Takes libwebp's buffer (freed here); an empty result is libwebp's failure.
std::vector<uint8_t> take(uint8_t* buf, size_t size) {
  std::vector<uint8_t> out(buf, buf + size);
  WebPFree(buf);
  if (size == 0) throw MediaError("encode_webp: libwebp failed");
  return out;
}

}  // namespace

std::vector<uint8_t> encode_webp(const Image& img, int quality) {
  check(img);
  if (quality < 0 || quality > 100) throw MediaError("encode_webp: quality must be in [0, 100]");
  uint8_t* buf = nullptr;
  const int stride = img.width * 3;
  const size_t size = WebPEncodeRGB(img.rgb.data(), img.width, img.height, stride,
                                    static_cast<float>(quality), &buf);
  return take(buf, size);
}

std::vector<uint8_t> encode_webp_lossless(const Image& img) {
  check(img);
  uint8_t* buf = nullptr;
  const size_t size =
      WebPEncodeLosslessRGB(img.rgb.data(), img.width, img.height, img.width * 3, &buf);
  return take(buf, size);
}

}  // namespace clef::media

// WebP via libwebp with WebPDecodeRGB semantics (alpha dropped), as torchvision's decode_webp;
// animated files are refused, as the reference does.
#include <webp/decode.h>

#include "media/image.h"

namespace clef::media {

ImageInfo probe_webp(const uint8_t* data, size_t size) {
  WebPBitstreamFeatures f;
  if (WebPGetFeatures(data, size, &f) != VP8_STATUS_OK) throw MediaError("malformed WebP");
  if (f.has_animation) throw MediaError("animated WebP images are not supported");
  return {f.width, f.height};
}

void decode_webp_into(const uint8_t* data, size_t size, uint64_t max_pixels, uint8_t* rgb,
                      size_t bytes) {
  const ImageInfo info = probe_webp(data, size);
  check_pixel_limit(info, max_pixels, "WebP");
  check_rgb_bytes(info, bytes);
  const size_t stride = static_cast<size_t>(info.width) * 3;
  if (!WebPDecodeRGBInto(data, size, rgb, bytes, static_cast<int>(stride)))
    throw MediaError("malformed WebP: decoding failed");
}

Image decode_webp(const uint8_t* data, size_t size, uint64_t max_pixels) {
  Image out = sized_image(probe_webp(data, size), max_pixels, "WebP");
  decode_webp_into(data, size, max_pixels, out.rgb.data(), out.rgb.size());
  return out;
}

}  // namespace clef::media

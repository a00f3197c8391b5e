// Request strings -> compressed files -> pixels: the data URI / raw base64 forms, the format
// sniffed from the magic bytes (as torchvision.io.decode_image does), and the per-format dispatch.
#include <string>
#include <utility>

#include "media/data_uri.h"
#include "media/image.h"

namespace clef::media {
namespace {

ImageFormat sniff(const std::vector<uint8_t>& b) {
  if (has_magic(b, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::Png;
  if (has_magic(b, "\xFF\xD8\xFF", 3)) return ImageFormat::Jpeg;
  if (has_magic(b, "RIFF", 4) && has_magic(b, "WEBP", 4, 8)) return ImageFormat::Webp;
  if (has_magic(b, "GIF8", 4)) throw MediaError("GIF images are not supported (PNG, JPEG, WebP)");
  if (has_magic(b, "II*\0", 4) || has_magic(b, "MM\0*", 4))
    throw MediaError("TIFF images are not supported (PNG, JPEG, WebP)");
  if (has_magic(b, "BM", 2)) throw MediaError("BMP images are not supported (PNG, JPEG, WebP)");
  throw MediaError("not a PNG, JPEG or WebP image");
}

}  // namespace

const char* format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::Png:
      return "png";
    case ImageFormat::Jpeg:
      return "jpeg";
    case ImageFormat::Webp:
      return "webp";
  }
  return "?";
}

EncodedImage parse_image_string(std::string_view text) {
  return identify_image(media_string_bytes(
      text, {"image/png;base64", "image/jpeg;base64", "image/jpg;base64", "image/webp;base64"},
      "image", "data:image/{png,jpeg,jpg,webp};base64,"));
}

EncodedImage identify_image(std::vector<uint8_t> bytes) {
  EncodedImage out;
  out.format = sniff(bytes);
  out.bytes = std::move(bytes);
  return out;
}

ImageInfo probe_image(const EncodedImage& img, uint64_t max_pixels) {
  ImageInfo info;
  switch (img.format) {
    case ImageFormat::Png:
      info = probe_png(img.bytes.data(), img.bytes.size());
      break;
    case ImageFormat::Jpeg:
      info = probe_jpeg(img.bytes.data(), img.bytes.size());
      break;
    case ImageFormat::Webp:
      info = probe_webp(img.bytes.data(), img.bytes.size());
      break;
  }
  if (info.width <= 0 || info.height <= 0)
    throw MediaError(std::string(format_name(img.format)) + " image has no pixels");
  const uint64_t pixels = static_cast<uint64_t>(info.width) * static_cast<uint64_t>(info.height);
  if (pixels > max_pixels)
    throw MediaError("image is " + std::to_string(info.width) + "x" + std::to_string(info.height) +
                     " = " + std::to_string(pixels) + " pixels; the limit is " +
                     std::to_string(max_pixels) + " (--max-image-pixels)");
  return info;
}

void check_rgb_bytes(const ImageInfo& info, size_t bytes) {
  if (bytes != static_cast<size_t>(info.width) * static_cast<size_t>(info.height) * 3)
    throw MediaError("image size differs from its header");
}

void check_pixel_limit(const ImageInfo& info, uint64_t max_pixels, const char* kind) {
  if (static_cast<uint64_t>(info.width) * static_cast<uint64_t>(info.height) > max_pixels)
    throw MediaError(std::string(kind) + " image over the pixel limit");
}

Image sized_image(const ImageInfo& info, uint64_t max_pixels, const char* kind) {
  check_pixel_limit(info, max_pixels, kind);
  Image out;
  out.width = info.width;
  out.height = info.height;
  out.rgb.resize(static_cast<size_t>(info.width) * static_cast<size_t>(info.height) * 3);
  return out;
}

void decode_image_into(const EncodedImage& img, uint64_t max_pixels, uint8_t* rgb, size_t bytes,
                       unsigned threads) {
  check_rgb_bytes(probe_image(img, max_pixels), bytes);
  switch (img.format) {
    case ImageFormat::Png:
      return decode_png_into(img.bytes.data(), img.bytes.size(), max_pixels, rgb, bytes);
    case ImageFormat::Jpeg:
      return decode_jpeg_into(img.bytes.data(), img.bytes.size(), max_pixels, rgb, bytes, threads);
    case ImageFormat::Webp:
      return decode_webp_into(img.bytes.data(), img.bytes.size(), max_pixels, rgb, bytes);
  }
  throw MediaError("unknown image format");
}

Image decode_image(const EncodedImage& img, uint64_t max_pixels, unsigned threads) {
  probe_image(img, max_pixels);
  switch (img.format) {
    case ImageFormat::Png:
      return decode_png(img.bytes.data(), img.bytes.size(), max_pixels);
    case ImageFormat::Jpeg:
      return decode_jpeg(img.bytes.data(), img.bytes.size(), max_pixels, threads);
    case ImageFormat::Webp:
      return decode_webp(img.bytes.data(), img.bytes.size(), max_pixels);
  }
  throw MediaError("unknown image format");
}

}  // namespace clef::media

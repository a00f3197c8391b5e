// Request strings -> compressed files -> pixels: the data URI / raw base64 forms, the format
// sniffed from the magic bytes (as torchvision.io.decode_image does), and the per-format dispatch.
#include <cstring>
#include <utility>

#include "media/image.h"

namespace clef::media {
namespace {

bool starts_with(const std::vector<uint8_t>& b, const char* magic, size_t n, size_t at = 0) {
  return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
}

ImageFormat sniff(const std::vector<uint8_t>& b) {
  if (starts_with(b, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::Png;
  if (starts_with(b, "\xFF\xD8\xFF", 3)) return ImageFormat::Jpeg;
  if (starts_with(b, "RIFF", 4) && starts_with(b, "WEBP", 4, 8)) return ImageFormat::Webp;
  if (starts_with(b, "GIF8", 4)) throw MediaError("GIF images are not supported (PNG, JPEG, WebP)");
  if (starts_with(b, "II*\0", 4) || starts_with(b, "MM\0*", 4))
    throw MediaError("TIFF images are not supported (PNG, JPEG, WebP)");
  if (starts_with(b, "BM", 2)) throw MediaError("BMP images are not supported (PNG, JPEG, WebP)");
  throw MediaError("not a PNG, JPEG or WebP image");
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
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
  std::string_view payload = text;
  const std::string head = lower(text.substr(0, 64));
  if (head.rfind("data:", 0) == 0) {
    const size_t comma = text.find(',');
    if (comma == std::string_view::npos) throw MediaError("data URI without a ',' before its data");
    const std::string meta = lower(text.substr(5, comma - 5));
    static const char* kAccepted[] = {"image/png;base64", "image/jpeg;base64", "image/jpg;base64",
                                      "image/webp;base64"};
    bool ok = false;
    for (const char* a : kAccepted) ok = ok || meta == a;
    if (!ok)
      throw MediaError("unsupported data URI \"data:" + meta.substr(0, 40) +
                       "\": expected data:image/{png,jpeg,jpg,webp};base64,");
    payload = text.substr(comma + 1);
  } else if (const size_t colon = head.find(':'); colon != std::string::npos) {
    // ':' is not in the base64 alphabet: this is a URL (http, https, file, ...), never fetched.
    throw MediaError("image URLs are not supported (\"" + head.substr(0, colon) +
                     ":\"): send the file as a data URI or raw base64");
  }
  if (payload.empty()) throw MediaError("empty image");
  return identify_image(base64_decode(payload));
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

Image decode_image(const EncodedImage& img, uint64_t max_pixels) {
  probe_image(img, max_pixels);
  switch (img.format) {
    case ImageFormat::Png:
      return decode_png(img.bytes.data(), img.bytes.size(), max_pixels);
    case ImageFormat::Jpeg:
      return decode_jpeg(img.bytes.data(), img.bytes.size(), max_pixels);
    case ImageFormat::Webp:
      return decode_webp(img.bytes.data(), img.bytes.size(), max_pixels);
  }
  throw MediaError("unknown image format");
}

}  // namespace clef::media

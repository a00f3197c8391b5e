// Decoding request images (docs/spec/media.md §1-2): a data URI or raw base64 of a PNG, JPEG or
// WebP file -> RGB uint8, exactly as the reference's torchvision.io.decode_image(mode=RGB).
// Nothing is ever fetched: URLs and file paths are refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace clef::media {

// A request's media is unusable (bad encoding, unsupported format, over a limit): the caller turns
// it into a 422 naming the field. The message is meant for the client.
class MediaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ImageFormat { Png, Jpeg, Webp };
const char* format_name(ImageFormat f);

// RGB uint8, row-major HWC, no padding.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
};

// The compressed file a request string carries.
struct EncodedImage {
  ImageFormat format = ImageFormat::Png;
  std::vector<uint8_t> bytes;
};

// Size from the file's header alone (nothing decoded).
struct ImageInfo {
  int width = 0;
  int height = 0;
};

// "data:image/{png,jpeg,jpg,webp};base64,..." or raw base64; the format is sniffed from the bytes.
// Throws MediaError for URLs, other data URI types, bad base64, GIF/TIFF/unknown files.
EncodedImage parse_image_string(std::string_view text);

// The file's format from its magic bytes (as torchvision.io.decode_image sniffs it). Throws
// MediaError for GIF, TIFF, BMP and anything else.
EncodedImage identify_image(std::vector<uint8_t> bytes);

// Reads the header only; throws MediaError when it is malformed or width*height > max_pixels, so
// that nothing is allocated for a huge image.
ImageInfo probe_image(const EncodedImage& img, uint64_t max_pixels);

// Decodes to RGB (header checked against max_pixels first). Throws MediaError. `threads`: how many
// threads the decode may use (a large baseline JPEG is decoded in bands; the caller's budget, see
// threads_per_item in media/parallel.h); the pixels never depend on it.
Image decode_image(const EncodedImage& img, uint64_t max_pixels, unsigned threads = 1);
// decode_image into the caller's buffer of exactly width x height x 3 bytes (the header's; else
// MediaError): an image already at its target size goes straight into the request's frame,
// without a buffer of its own (a zero-filled 3 MB at 1024^2) and a copy.
void decode_image_into(const EncodedImage& img, uint64_t max_pixels, uint8_t* rgb, size_t bytes,
                       unsigned threads = 1);
// Throws MediaError unless bytes == width x height x 3 (the _into decoders' check).
void check_rgb_bytes(const ImageInfo& info, size_t bytes);
// Throws MediaError("<kind> image over the pixel limit") when width x height > max_pixels.
void check_pixel_limit(const ImageInfo& info, uint64_t max_pixels, const char* kind);
// The decoders' Image forms: an Image of the header's size (checked against the pixel limit before
// anything is allocated) for their _into form to fill.
Image sized_image(const ImageInfo& info, uint64_t max_pixels, const char* kind);

// Per-format decoders (decode_png.cpp, decode_jpeg.cpp, decode_webp.cpp).
ImageInfo probe_png(const uint8_t* data, size_t size);
ImageInfo probe_jpeg(const uint8_t* data, size_t size);
ImageInfo probe_webp(const uint8_t* data, size_t size);
Image decode_png(const uint8_t* data, size_t size, uint64_t max_pixels);
void decode_png_into(const uint8_t* data, size_t size, uint64_t max_pixels, uint8_t* rgb,
                     size_t bytes);
void decode_jpeg_into(const uint8_t* data, size_t size, uint64_t max_pixels, uint8_t* rgb,
                      size_t bytes, unsigned threads = 1);
void decode_webp_into(const uint8_t* data, size_t size, uint64_t max_pixels, uint8_t* rgb,
                      size_t bytes);
Image decode_jpeg(const uint8_t* data, size_t size, uint64_t max_pixels, unsigned threads = 1);
// decode_jpeg with its rows split into `bands` bands (iMCU-row aligned; fewer when the image is
// too short), decoded concurrently whatever the file's kind and size: byte-identical to one pass.
// decode_jpeg picks the count itself; this form is for the tests.
Image decode_jpeg_bands(const uint8_t* data, size_t size, uint64_t max_pixels, int bands);
Image decode_webp(const uint8_t* data, size_t size, uint64_t max_pixels);

// Standard base64 (RFC 4648 alphabet, '=' padding optional, ASCII whitespace skipped).
std::vector<uint8_t> base64_decode(std::string_view text);
// Standard base64 with '=' padding (what a client sends).
std::string base64_encode(const std::vector<uint8_t>& bytes);

// An RGB image as a PNG file (encode_png.cpp; 8-bit RGB). Throws MediaError.
std::vector<uint8_t> encode_png(const Image& img);
// As a baseline JPEG (encode_jpeg.cpp; libjpeg-turbo defaults, 4:2:0) at quality 1-100.
std::vector<uint8_t> encode_jpeg(const Image& img, int quality);
// As a lossy WebP at quality 0-100, or a lossless one (encode_webp.cpp). Throw MediaError.
std::vector<uint8_t> encode_webp(const Image& img, int quality);
std::vector<uint8_t> encode_webp_lossless(const Image& img);

// A deterministic test picture (synthetic_image.cpp): smooth red and green gradients, a blue
// x-xor-y texture and seeded noise (up to 15 levels in green, 63 in blue): neither flat nor pure
// noise. The _uri form encodes it as a client would send it: PNG (libpng level 1), JPEG (quality
// 90, 4:2:0) or lossy WebP (quality 80), as a data URI.
Image synthetic_image(int width, int height, int seed);
std::string synthetic_image_uri(int width, int height, int seed, ImageFormat format);

}  // namespace clef::media

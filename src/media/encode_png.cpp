// PNG writing via libpng (RGB, 8-bit): synthetic request images for `clefserve profile` and the
// tests, which then travel through the same decoders as a client's.
#include <png.h>

#include <csetjmp>

#include "media/image.h"

namespace clef::media {
namespace {

void write_to_vector(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

void flush_nothing(png_structp) {}

}  // namespace

std::vector<uint8_t> encode_png(const Image& img) {
  if (img.width <= 0 || img.height <= 0 ||
      img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3)
    throw MediaError("encode_png: the image is not width x height x 3 bytes");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (!png) throw MediaError("encode_png: libpng could not start");
  png_infop info = png_create_info_struct(png);
  std::vector<uint8_t> out;
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, info ? &info : nullptr);
    throw MediaError("encode_png: libpng failed");
  }
  png_set_write_fn(png, &out, write_to_vector, flush_nothing);
  png_set_IHDR(png, info, static_cast<png_uint_32>(img.width), static_cast<png_uint_32>(img.height),
               8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(png, 1);  // speed: these files are made to be decoded at once
  png_write_info(png, info);
  for (int y = 0; y < img.height; ++y)
    png_write_row(png, img.rgb.data() + static_cast<size_t>(y) * img.width * 3);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace clef::media

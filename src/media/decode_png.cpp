// PNG via libpng, as torchvision's decode_png(mode=RGB): palette expanded, gray replicated, alpha
// stripped (never composited), 16-bit refused (the reference would feed its values unscaled).
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "media/image.h"

namespace clef::media {
namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

struct Source {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

void read_from_memory(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<Source*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "the file is truncated");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

// libpng reports errors by longjmp; the message is kept for the MediaError.
struct ErrorSink {
  char message[200] = "malformed PNG";
};

void on_error(png_structp png, png_const_charp msg) {
  auto* sink = static_cast<ErrorSink*>(png_get_error_ptr(png));
  std::snprintf(sink->message, sizeof sink->message, "malformed PNG: %s", msg);
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}  // the reference ignores warnings too

// The libpng part, kept free of C++ objects with destructors because of setjmp/longjmp: `rows`
// points into a buffer the caller owns. Returns false with sink->message set on error.
bool read_rgb(Source* src, ErrorSink* sink, uint32_t expect_w, uint32_t expect_h, uint8_t* pixels) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, sink, on_error, on_warning);
  if (!png) return false;
  png_infop info = png_create_info_struct(png);
  png_bytep* volatile rows = nullptr;
  if (!info || setjmp(png_jmpbuf(png))) {
    png_free(png, rows);
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    return false;
  }
  png_set_read_fn(png, src, read_from_memory);
  png_set_user_limits(png, expect_w, expect_h);
  png_read_info(png, info);
  const int color = png_get_color_type(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  png_set_strip_alpha(png);  // also drops the alpha a palette's tRNS expands to
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_image_width(png, info) != expect_w || png_get_image_height(png, info) != expect_h ||
      png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
      png_get_rowbytes(png, info) != static_cast<size_t>(expect_w) * 3)
    png_error(png, "unexpected layout after conversion to RGB");
  rows = static_cast<png_bytep*>(png_malloc(png, sizeof(png_bytep) * expect_h));
  for (uint32_t y = 0; y < expect_h; ++y) rows[y] = pixels + static_cast<size_t>(y) * expect_w * 3;
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  png_free(png, rows);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

}  // namespace

ImageInfo probe_png(const uint8_t* data, size_t size) {
  // Signature (8), IHDR length (4) and type (4), width, height, bit depth, colour type.
  if (size < 8 + 8 + 13 || std::memcmp(data + 12, "IHDR", 4) != 0 || be32(data + 8) != 13)
    throw MediaError("malformed PNG: no IHDR header");
  const uint32_t w = be32(data + 16), h = be32(data + 20);
  const uint8_t depth = data[24];
  if (w == 0 || h == 0 || w > 0x7FFFFFFFu || h > 0x7FFFFFFFu)
    throw MediaError("malformed PNG: bad dimensions");
  if (depth == 16)
    throw MediaError("16-bit PNG images are not supported: convert to 8 bits per channel");
  return {static_cast<int>(w), static_cast<int>(h)};
}

void decode_png_into(const uint8_t* data, size_t size, uint64_t max_pixels, uint8_t* rgb,
                     size_t bytes) {
  const ImageInfo info = probe_png(data, size);
  check_pixel_limit(info, max_pixels, "PNG");
  check_rgb_bytes(info, bytes);
  Source src{data, size, 0};
  ErrorSink sink;
  if (!read_rgb(&src, &sink, static_cast<uint32_t>(info.width), static_cast<uint32_t>(info.height),
                rgb))
    throw MediaError(sink.message);
}

Image decode_png(const uint8_t* data, size_t size, uint64_t max_pixels) {
  Image out = sized_image(probe_png(data, size), max_pixels, "PNG");
  decode_png_into(data, size, max_pixels, out.rgb.data(), out.rgb.size());
  return out;
}

}  // namespace clef::media

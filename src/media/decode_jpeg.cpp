// JPEG via libjpeg-turbo with its defaults (islow IDCT, fancy upsampling), as torchvision's
// decode_jpeg(mode=RGB). No EXIF rotation. A truncated file is refused (libjpeg would pad it with
// grey), and so are CMYK files and progressive files with an absurd number of scans (a known way to
// make decoding take minutes).
// jpeglib.h needs <cstdio> and <cstddef> first (FILE, size_t); jerror.h gives the warning codes.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "media/image.h"

namespace clef::media {
namespace {

constexpr int kMaxScans = 1000;

struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 32];
};

void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorMgr*>(cinfo->err);
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  std::snprintf(err->message, sizeof err->message, "malformed JPEG: %s", text);
  std::longjmp(err->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  // Level -1 is a warning; premature end of data means the file was cut.
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* err = reinterpret_cast<ErrorMgr*>(cinfo->err);
    std::snprintf(err->message, sizeof err->message, "malformed JPEG: the file is truncated");
    std::longjmp(err->jump, 1);
  }
}

void on_progress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxScans) {
    auto* err = reinterpret_cast<ErrorMgr*>(cinfo->err);
    std::snprintf(err->message, sizeof err->message,
                  "malformed JPEG: more than %d progressive scans", kMaxScans);
    std::longjmp(err->jump, 1);
  }
}

// Header only (pixels == nullptr) or the whole image into `pixels` (width*height*3, the caller's).
// Free of C++ objects with destructors because of setjmp/longjmp.
bool run(const uint8_t* data, size_t size, uint8_t* pixels, int* w, int* h, int* components,
         char* message, size_t message_size) {
  jpeg_decompress_struct cinfo;
  ErrorMgr err;
  jpeg_progress_mgr progress;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
  std::snprintf(err.message, sizeof err.message, "malformed JPEG");
  if (setjmp(err.jump)) {
    std::snprintf(message, message_size, "%s", err.message);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  progress.progress_monitor = on_progress;
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  *w = static_cast<int>(cinfo.image_width);
  *h = static_cast<int>(cinfo.image_height);
  *components = cinfo.num_components;
  if (pixels) {
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
      std::snprintf(message, message_size, "CMYK JPEG images are not supported: convert to RGB");
      jpeg_destroy_decompress(&cinfo);
      return false;
    }
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_width != cinfo.image_width || cinfo.output_height != cinfo.image_height ||
        cinfo.output_components != 3) {
      std::snprintf(message, message_size, "malformed JPEG: unexpected output layout");
      jpeg_destroy_decompress(&cinfo);
      return false;
    }
    const size_t stride = static_cast<size_t>(cinfo.output_width) * 3;
    while (cinfo.output_scanline < cinfo.output_height) {
      JSAMPROW row = pixels + static_cast<size_t>(cinfo.output_scanline) * stride;
      jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
  }
  jpeg_destroy_decompress(&cinfo);
  return true;
}

}  // namespace

ImageInfo probe_jpeg(const uint8_t* data, size_t size) {
  int w = 0, h = 0, c = 0;
  char message[JMSG_LENGTH_MAX + 32];
  if (!run(data, size, nullptr, &w, &h, &c, message, sizeof message)) throw MediaError(message);
  return {w, h};
}

Image decode_jpeg(const uint8_t* data, size_t size, uint64_t max_pixels) {
  const ImageInfo info = probe_jpeg(data, size);
  if (static_cast<uint64_t>(info.width) * static_cast<uint64_t>(info.height) > max_pixels)
    throw MediaError("JPEG image over the pixel limit");
  Image out;
  out.width = info.width;
  out.height = info.height;
  out.rgb.resize(static_cast<size_t>(info.width) * static_cast<size_t>(info.height) * 3);
  int w = 0, h = 0, c = 0;
  char message[JMSG_LENGTH_MAX + 32];
  if (!run(data, size, out.rgb.data(), &w, &h, &c, message, sizeof message))
    throw MediaError(message);
  return out;
}

}  // namespace clef::media

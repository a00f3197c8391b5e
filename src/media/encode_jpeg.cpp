// JPEG writing via libjpeg-turbo (baseline, 4:2:0, RGB in): synthetic photo-like request images
// for `clefserve profile` and the tests, decoded by the same path as a client's.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
// clang-format off
#include <jpeglib.h>
// clang-format on

#include "media/image.h"

namespace clef::media {
namespace {

struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

void on_error(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<ErrorMgr*>(cinfo->err)->jump, 1);
}

// Free of C++ objects with destructors because of setjmp/longjmp; *out is malloc'ed by libjpeg.
bool compress(const Image& img, int quality, unsigned char** out, unsigned long* size) {
  jpeg_compress_struct cinfo;
  ErrorMgr err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, out, size);
  cinfo.image_width = static_cast<JDIMENSION>(img.width);
  cinfo.image_height = static_cast<JDIMENSION>(img.height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(img.width) * 3;
  while (cinfo.next_scanline < cinfo.image_height) {
    // libjpeg takes non-const rows but only reads them.
    JSAMPROW row = const_cast<JSAMPROW>(img.rgb.data() + cinfo.next_scanline * stride);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

}  // namespace

std::vector<uint8_t> encode_jpeg(const Image& img, int quality) {
  if (img.width <= 0 || img.height <= 0 || img.width > 65500 || img.height > 65500 ||
      img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3)
    throw MediaError("encode_jpeg: the image is not width x height x 3 bytes (at most 65500)");
  if (quality < 1 || quality > 100) throw MediaError("encode_jpeg: quality must be in [1, 100]");
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const bool ok = compress(img, quality, &buf, &size);
  std::vector<uint8_t> out;
  if (ok && buf) out.assign(buf, buf + size);
  std::free(buf);
  if (!ok) throw MediaError("encode_jpeg: libjpeg failed");
  return out;
}

}  // namespace clef::media

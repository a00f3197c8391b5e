// JPEG via libjpeg-turbo with its defaults (islow IDCT, fancy upsampling), as torchvision's
// decode_jpeg(mode=RGB). No EXIF rotation. A truncated file is refused (libjpeg would pad it with
// grey), and so are CMYK files and progressive files with an absurd number of scans (a known way to
// make decoding take minutes).
//
// A large single-scan file is decoded in horizontal bands, one decompressor per band on its own
// thread, each skipping to its first row (jpeg_skip_scanlines: the rows above are still
// Huffman-decoded, but not inverse-DCT'd, upsampled or colour-converted) and writing its rows
// straight into the image. The result is byte-identical to one pass (tests/media/jpeg_bands_test).
// jpeglib.h needs <cstdio> and <cstddef> first (FILE, size_t); jerror.h gives the warning codes.
#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <vector>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "media/image.h"
#include "media/parallel.h"

namespace clef::media {
namespace {

constexpr int kMaxScans = 1000;
constexpr int kMaxBands = 8;
// A band's pixels at least: two bands of a q90 photo took 0.89 of one pass's wall time at 362x362
// here, 0.94 at 256x256 (not worth 1.5x the CPU) and 1.08 at 181x181 (perf-log v13a).
constexpr uint64_t kMinBandPixels = 1 << 16;

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

// What the header says.
struct Header {
  int width = 0;
  int height = 0;
  int imcu_rows = 8;  // output rows per iMCU row: band edges there repeat no inverse DCT
  // One scan (baseline, not progressive or one scan per component) and a sampling layout that
  // jpeg_bands_test proves exact: only then are bands both exact and worth their threads.
  bool bandable = false;
};

// Grey 1x1, or 3 components with full-size chroma and luma at 1x1, 2x1, 1x2, 2x2 or 4x1
// (4:4:4, 4:2:2, 4:4:0, 4:2:0, 4:1:1): the layouts the band test covers.
bool tested_sampling(const jpeg_decompress_struct& cinfo) {
  const jpeg_component_info* c = cinfo.comp_info;
  if (cinfo.num_components == 1) return c[0].h_samp_factor == 1 && c[0].v_samp_factor == 1;
  if (cinfo.num_components != 3) return false;
  for (int i = 1; i < 3; ++i)
    if (c[i].h_samp_factor != 1 || c[i].v_samp_factor != 1) return false;
  const int h = c[0].h_samp_factor, v = c[0].v_samp_factor;
  return (v == 1 && (h == 1 || h == 2 || h == 4)) || (v == 2 && (h == 1 || h == 2));
}

// The rows [first, end) of the image into `pixels` (the whole image's buffer, width*height*3,
// the caller's), or the header only (pixels == nullptr). Rows above `first` are skipped; a band
// that ends at the bottom reads on to the end of the file, as one pass does, so that a cut file
// is refused. Free of C++ objects with destructors because of setjmp/longjmp.
bool run(const uint8_t* data, size_t size, uint8_t* pixels, int first, int end, Header* header,
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
  if (header) {
    header->width = static_cast<int>(cinfo.image_width);
    header->height = static_cast<int>(cinfo.image_height);
    header->imcu_rows = DCTSIZE * std::max(1, cinfo.max_v_samp_factor);
    header->bandable = !jpeg_has_multiple_scans(&cinfo) && tested_sampling(cinfo);
  }
  if (pixels) {
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
      std::snprintf(message, message_size, "CMYK JPEG images are not supported: convert to RGB");
      jpeg_destroy_decompress(&cinfo);
      return false;
    }
    cinfo.out_color_space = JCS_RGB;
    // libjpeg-turbo's defaults, set explicitly: the reference decodes with exactly these.
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    cinfo.do_block_smoothing = TRUE;
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_width != cinfo.image_width || cinfo.output_height != cinfo.image_height ||
        cinfo.output_components != 3 || first < 0 || first >= end ||
        end > static_cast<int>(cinfo.output_height)) {
      std::snprintf(message, message_size, "malformed JPEG: unexpected output layout");
      jpeg_destroy_decompress(&cinfo);
      return false;
    }
    if (first > 0 && jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(first)) !=
                         static_cast<JDIMENSION>(first)) {
      std::snprintf(message, message_size, "malformed JPEG: could not skip to row %d", first);
      jpeg_destroy_decompress(&cinfo);
      return false;
    }
    const size_t stride = static_cast<size_t>(cinfo.output_width) * 3;
    while (cinfo.output_scanline < static_cast<JDIMENSION>(end)) {
      JSAMPROW row = pixels + static_cast<size_t>(cinfo.output_scanline) * stride;
      jpeg_read_scanlines(&cinfo, &row, 1);
    }
    // A band above the bottom stops here (destroy aborts the decompressor).
    if (cinfo.output_scanline == cinfo.output_height) jpeg_finish_decompress(&cinfo);
  }
  jpeg_destroy_decompress(&cinfo);
  return true;
}

Header read_header(const uint8_t* data, size_t size) {
  Header h;
  char message[JMSG_LENGTH_MAX + 32];
  if (!run(data, size, nullptr, 0, 0, &h, message, sizeof message)) throw MediaError(message);
  return h;
}

// The share of a whole decode that is entropy decoding, which every band repeats for all the rows
// above its end. Measured on libjpeg-turbo 2.1.5 (perf-log v13a) as about (0.5 + 1.3 b) /
// (2.8 + 1.8 b) at b bits per pixel: 0.2 for a smooth picture, 0.53 for a noisy one at quality 90,
// 0.63 at quality 100. Only the bands' balance depends on it, never the pixels.
double entropy_share(size_t bytes, const Header& h) {
  const double bits = 8.0 * static_cast<double>(bytes) /
                      (static_cast<double>(h.width) * static_cast<double>(h.height));
  return std::clamp((0.5 + 1.3 * bits) / (2.8 + 1.8 * bits), 0.1, 0.9);
}

// Where each of n bands ends, on iMCU rows. Band k costs share x (its end) for the entropy
// decoding plus (1 - share) x (its height) for the rest, so equal costs put the k-th end at
// (1 - (1-share)^k) / (1 - (1-share)^n) of the height: later bands are shorter. Bands that
// rounding leaves empty are dropped.
std::vector<int> band_ends(const Header& h, int n, double share) {
  std::vector<int> ends;
  const double keep = 1.0 - share;
  const double whole = 1.0 - std::pow(keep, n);
  for (int k = 1; k < n; ++k) {
    const double at = h.height * (1.0 - std::pow(keep, k)) / whole;
    const int row = static_cast<int>(std::lround(at / h.imcu_rows)) * h.imcu_rows;
    if (row > (ends.empty() ? 0 : ends.back()) && row < h.height) ends.push_back(row);
  }
  ends.push_back(h.height);
  return ends;
}

// How many bands for `threads` threads: with n bands the wall time is share / (1 - (1-share)^n)
// of one pass, its floor `share` being the entropy decoding of the whole file that the bottom band
// always pays; bands are added until the time is within ~10 % of that floor (4 for a noisy q90
// photo, the cap for a smooth one), and none is smaller than kMinBandPixels.
int band_count(const Header& h, size_t bytes, unsigned threads) {
  if (!h.bandable || threads <= 1) return 1;
  const double share = entropy_share(bytes, h);
  int n = 1;
  while (n < kMaxBands && std::pow(1.0 - share, n) > 0.1) ++n;
  const uint64_t pixels = static_cast<uint64_t>(h.width) * static_cast<uint64_t>(h.height);
  const uint64_t by_size = std::max<uint64_t>(1, pixels / kMinBandPixels);
  return static_cast<int>(std::min<uint64_t>({static_cast<uint64_t>(n), threads, by_size}));
}

// Into `rgb` (the caller's width x height x 3 bytes).
void decode_in_bands(const uint8_t* data, size_t size, const Header& h, int bands, uint8_t* rgb) {
  const std::vector<int> ends = band_ends(h, std::max(1, bands), entropy_share(size, h));
  auto band = [&](size_t k) {
    char message[JMSG_LENGTH_MAX + 32];
    const int first = k == 0 ? 0 : ends[k - 1];
    if (!run(data, size, rgb, first, ends[k], nullptr, message, sizeof message))
      throw MediaError(message);
  };
  // The first failing band (by index) is the one whose message one pass would give: every band
  // repeats one pass's work up to its own end.
  parallel_items(ends.size(), band, static_cast<unsigned>(ends.size()));
}

// An Image of the header's size (the pixel limit checked first), decoded in `bands` bands.
Image decode_in_bands(const uint8_t* data, size_t size, const Header& h, uint64_t max_pixels,
                      int bands) {
  Image out = sized_image({h.width, h.height}, max_pixels, "JPEG");
  decode_in_bands(data, size, h, bands, out.rgb.data());
  return out;
}

Header checked_header(const uint8_t* data, size_t size, uint64_t max_pixels) {
  const Header h = read_header(data, size);
  check_pixel_limit({h.width, h.height}, max_pixels, "JPEG");
  return h;
}

}  // namespace

ImageInfo probe_jpeg(const uint8_t* data, size_t size) {
  const Header h = read_header(data, size);
  return {h.width, h.height};
}

void decode_jpeg_into(const uint8_t* data, size_t size, uint64_t max_pixels, uint8_t* rgb,
                      size_t bytes, unsigned threads) {
  const Header h = checked_header(data, size, max_pixels);
  check_rgb_bytes({h.width, h.height}, bytes);
  decode_in_bands(data, size, h, band_count(h, size, threads), rgb);
}

Image decode_jpeg(const uint8_t* data, size_t size, uint64_t max_pixels, unsigned threads) {
  const Header h = read_header(data, size);
  return decode_in_bands(data, size, h, max_pixels, band_count(h, size, threads));
}

Image decode_jpeg_bands(const uint8_t* data, size_t size, uint64_t max_pixels, int bands) {
  return decode_in_bands(data, size, read_header(data, size), max_pixels, bands);
}

}  // namespace clef::media

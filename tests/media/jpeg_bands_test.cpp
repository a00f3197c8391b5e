// The banded JPEG decode (decode_jpeg.cpp: one decompressor per band of rows, each skipping to its
// first row) against one plain libjpeg pass written here with the parameters the reference uses:
// byte-identical for every band count 1-8, over sizes (1x1, odd, not multiples of 16), sampling
// layouts, restart intervals, qualities, smooth and noisy content, and the file kinds the server
// keeps on one thread (progressive, one scan per component, arithmetic coding). Truncated,
// corrupt and CMYK files: the banded decode gives exactly what one pass gives (the same refusal,
// or for a corrupt file that libjpeg decodes anyway, the same pixels).
#include <gtest/gtest.h>

#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "json/value.h"
#include "media/image.h"
#include "media/parallel.h"
#include "media/processor.h"
#include "model/safetensors.h"
#include "support/media_kwargs.h"
#include "support/parse_json.h"

namespace {

namespace media = clef::media;

constexpr uint64_t kLimit = 1u << 26;

// A file the test encodes: luma sampling h x v over full-size chroma (components 3), or grey.
struct Spec {
  int width = 0;
  int height = 0;
  int components = 3;
  int h = 2;
  int v = 2;
  int quality = 90;
  int restart_rows = 0;
  bool noisy = true;
  bool progressive = false;
  bool arithmetic = false;
  bool one_scan_per_component = false;
};

std::string describe(const Spec& s) {
  char text[200];
  std::snprintf(text, sizeof text, "%dx%d comps %d sampling %dx%d q%d restart %d %s%s%s%s", s.width,
                s.height, s.components, s.h, s.v, s.quality, s.restart_rows,
                s.noisy ? "noisy" : "smooth", s.progressive ? " progressive" : "",
                s.arithmetic ? " arithmetic" : "",
                s.one_scan_per_component ? " scan-per-component" : "");
  return text;
}

// Smooth ramps (few bits a pixel) or media::synthetic_image (seeded noise: many).
media::Image picture(const Spec& s) {
  if (s.noisy) return media::synthetic_image(s.width, s.height, s.width + s.height);
  media::Image img;
  img.width = s.width;
  img.height = s.height;
  img.rgb.resize(static_cast<size_t>(s.width) * s.height * 3);
  for (int y = 0; y < s.height; ++y)
    for (int x = 0; x < s.width; ++x) {
      uint8_t* p = img.rgb.data() + (static_cast<size_t>(y) * s.width + x) * 3;
      p[0] = static_cast<uint8_t>(x * 255 / std::max(s.width - 1, 1));
      p[1] = static_cast<uint8_t>(y * 255 / std::max(s.height - 1, 1));
      p[2] = static_cast<uint8_t>((x + 2 * y) / 5);
    }
  return img;
}

struct JpegError {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// The spec's one extra rule (docs/spec/media.md §2): a cut file is refused, not padded with grey.
void on_warning(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) on_error(cinfo);
}

// Free of C++ objects with destructors because of setjmp/longjmp; *out is malloc'ed by libjpeg.
bool compress(const Spec& s, const uint8_t* rgb, unsigned char** out, unsigned long* size,
              char* message) {
  jpeg_compress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  if (setjmp(err.jump)) {
    std::snprintf(message, JMSG_LENGTH_MAX, "%s", err.message);
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, out, size);
  cinfo.image_width = static_cast<JDIMENSION>(s.width);
  cinfo.image_height = static_cast<JDIMENSION>(s.height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  if (s.components == 1) jpeg_set_colorspace(&cinfo, JCS_GRAYSCALE);
  jpeg_set_quality(&cinfo, s.quality, TRUE);
  cinfo.comp_info[0].h_samp_factor = s.h;
  cinfo.comp_info[0].v_samp_factor = s.v;
  for (int i = 1; i < cinfo.num_components; ++i)
    cinfo.comp_info[i].h_samp_factor = cinfo.comp_info[i].v_samp_factor = 1;
  cinfo.restart_in_rows = s.restart_rows;
  cinfo.arith_code = s.arithmetic ? TRUE : FALSE;
  if (s.progressive) jpeg_simple_progression(&cinfo);
  jpeg_scan_info scans[4];
  if (s.one_scan_per_component) {
    for (int i = 0; i < cinfo.num_components; ++i) {
      scans[i].comps_in_scan = 1;
      scans[i].component_index[0] = i;
      scans[i].Ss = 0;
      scans[i].Se = 63;
      scans[i].Ah = scans[i].Al = 0;
    }
    cinfo.scan_info = scans;
    cinfo.num_scans = cinfo.num_components;
  }
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(s.width) * 3;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(rgb + cinfo.next_scanline * stride);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

std::vector<uint8_t> encode(const Spec& s) {
  const media::Image img = picture(s);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  char message[JMSG_LENGTH_MAX] = "";
  const bool ok = compress(s, img.rgb.data(), &buf, &size, message);
  std::vector<uint8_t> out;
  if (ok && buf) out.assign(buf, buf + size);
  std::free(buf);
  EXPECT_TRUE(ok) << describe(s) << ": " << message;
  return out;
}

// One pass of plain libjpeg with the reference's parameters (RGB out, islow IDCT, fancy
// upsampling, block smoothing), refusing a cut file: the oracle the bands must match. Not
// media::decode_jpeg, so that a change there cannot move the expected outcome.
bool one_pass(const std::vector<uint8_t>& file, std::vector<uint8_t>& rgb) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_warning;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, file.data(), static_cast<unsigned long>(file.size()));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  cinfo.do_block_smoothing = TRUE;
  jpeg_start_decompress(&cinfo);
  const size_t stride = static_cast<size_t>(cinfo.output_width) * 3;
  rgb.assign(stride * cinfo.output_height, 0);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = rgb.data() + static_cast<size_t>(cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

// What a decode gave: the pixels, or the refusal's message.
struct Outcome {
  std::vector<uint8_t> rgb;
  std::string refusal;
};

template <typename Decode>
Outcome outcome(Decode&& decode) {
  Outcome o;
  try {
    o.rgb = decode().rgb;
  } catch (const media::MediaError& e) {
    o.refusal = e.what();
  }
  return o;
}

Outcome banded(const std::vector<uint8_t>& file, int bands) {
  return outcome([&] { return media::decode_jpeg_bands(file.data(), file.size(), kLimit, bands); });
}

Outcome single(const std::vector<uint8_t>& file) {
  return outcome([&] { return media::decode_jpeg(file.data(), file.size(), kLimit, 1); });
}

// Every band count (and decode_jpeg with a budget of 8, whatever count it picks) gives the
// oracle's bytes.
void expect_bands_exact(const Spec& s) {
  const std::vector<uint8_t> file = encode(s);
  std::vector<uint8_t> expected;
  ASSERT_TRUE(one_pass(file, expected)) << describe(s);
  ASSERT_EQ(expected.size(), static_cast<size_t>(s.width) * s.height * 3) << describe(s);
  for (int bands = 1; bands <= 8; ++bands) {
    const Outcome got = banded(file, bands);
    ASSERT_EQ(got.refusal, "") << describe(s) << ", " << bands << " bands";
    // ASSERT: one mismatch says enough (and a byte dump of a megapixel image does not help).
    ASSERT_TRUE(got.rgb == expected) << describe(s) << ", " << bands << " bands";
  }
  const Outcome budget = outcome([&] {
    const media::Image img = media::decode_jpeg(file.data(), file.size(), kLimit, 8);
    EXPECT_EQ(img.width, s.width);
    EXPECT_EQ(img.height, s.height);
    return img;
  });
  EXPECT_EQ(budget.refusal, "") << describe(s);
  EXPECT_TRUE(budget.rgb == expected) << describe(s) << ", budget of 8 threads";
}

struct Layout {
  int components, h, v;
};
// 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1 and grey (decode_jpeg's tested_sampling).
constexpr Layout kLayouts[] = {{3, 1, 1}, {3, 2, 1}, {3, 2, 2}, {3, 1, 2}, {3, 4, 1}, {1, 1, 1}};

// A width x height file of this sampling layout; the other fields at their defaults.
Spec sized(int width, int height, const Layout& layout) {
  Spec s;
  s.width = width;
  s.height = height;
  s.components = layout.components;
  s.h = layout.h;
  s.v = layout.v;
  return s;
}

TEST(JpegBands, EveryBandCountMatchesOnePass) {
  const std::pair<int, int> sizes[] = {{1, 1},      {17, 333}, {333, 17}, {64, 48},
                                       {1023, 769}, {4000, 7}, {7, 1100}, {1024, 1024}};
  constexpr int kQualities[] = {50, 90, 100};
  int quality_turn = 0;
  for (const auto& [w, h] : sizes)
    for (const Layout& layout : kLayouts)
      for (const int restart : {0, 1})
        for (const bool noisy : {true, false}) {
          Spec s = sized(w, h, layout);
          s.restart_rows = restart;
          s.noisy = noisy;
          s.quality = kQualities[quality_turn++ % 3];
          expect_bands_exact(s);
          if (HasFatalFailure()) return;
        }
}

TEST(JpegBands, EveryQualityAtOneLargeSize) {
  for (const int quality : {50, 90, 100})
    for (const Layout& layout : {kLayouts[2], kLayouts[3]}) {
      Spec s = sized(1001, 1003, layout);
      s.quality = quality;
      expect_bands_exact(s);
      if (HasFatalFailure()) return;
    }
}

// Kept on one thread by decode_jpeg, but the band mechanism is exact for them too.
TEST(JpegBands, ProgressiveScanPerComponentAndArithmeticFiles) {
  for (const int which : {0, 1, 2})
    for (const Layout& layout : {kLayouts[2], kLayouts[3], kLayouts[5]}) {
      Spec s = sized(555, 421, layout);
      s.progressive = which == 0;
      s.one_scan_per_component = which == 1;
      s.arithmetic = which == 2;
      s.restart_rows = which == 2 ? 3 : 0;
      expect_bands_exact(s);
      if (HasFatalFailure()) return;
    }
}

// A cut file: one pass refuses it; so does every band count, with the same message (the first
// failing band is the one whose work covers where one pass failed).
TEST(JpegBands, TruncatedFilesAreRefusedLikeOnePass) {
  for (const int restart : {0, 2}) {
    Spec s;
    s.width = 600;
    s.height = 500;
    s.restart_rows = restart;
    const std::vector<uint8_t> full = encode(s);
    for (const double keep : {0.05, 0.3, 0.5, 0.9, 0.999}) {
      for (const size_t cut : {static_cast<size_t>(keep * static_cast<double>(full.size())),
                               full.size() - 2, full.size() - 1}) {
        const std::vector<uint8_t> file(full.begin(), full.begin() + static_cast<long>(cut));
        std::vector<uint8_t> ignored;
        ASSERT_FALSE(one_pass(file, ignored)) << "cut to " << cut;
        const Outcome one = single(file);
        EXPECT_NE(one.refusal.find("malformed JPEG"), std::string::npos)
            << "cut to " << cut << " of " << full.size() << ": " << one.refusal;
        for (int bands = 2; bands <= 8; ++bands)
          EXPECT_EQ(banded(file, bands).refusal, one.refusal)
              << "cut to " << cut << " of " << full.size() << ", " << bands << " bands";
      }
    }
  }
}

// Corrupt entropy data: libjpeg refuses some, decodes others with a warning; the one-thread decode
// does as the oracle does, and the bands exactly as it does (the same refusal or the same pixels).
TEST(JpegBands, CorruptFilesDecodeOrFailLikeOnePass) {
  int refused = 0, decoded = 0;
  for (const int restart : {0, 1}) {
    Spec s;
    s.width = 480;
    s.height = 360;
    s.restart_rows = restart;
    const std::vector<uint8_t> clean = encode(s);
    for (int trial = 0; trial < 24; ++trial) {
      std::vector<uint8_t> file = clean;
      // Past the headers (~600 bytes here), into the entropy-coded data.
      const size_t at = 700 + static_cast<size_t>(trial) * (file.size() - 800) / 24;
      if (trial % 3 == 0) {
        file[at] = 0xFF;  // a marker where data should be
        file[at + 1] = static_cast<uint8_t>(0xC0 + trial);
      } else {
        for (size_t i = at; i < at + 4 * static_cast<size_t>(trial); ++i) file[i] ^= 0x5A;
      }
      const Outcome one = single(file);
      (one.refusal.empty() ? decoded : refused) += 1;
      // The one-thread decode against the oracle first (refused or not; if not, the pixels).
      std::vector<uint8_t> oracle;
      const bool oracle_ok = one_pass(file, oracle);
      EXPECT_EQ(one.refusal.empty(), oracle_ok) << "trial " << trial << ": " << one.refusal;
      if (oracle_ok) {
        EXPECT_TRUE(one.rgb == oracle) << "trial " << trial;
      }
      for (const int bands : {2, 3, 5, 8}) {
        const Outcome got = banded(file, bands);
        EXPECT_EQ(got.refusal, one.refusal) << "trial " << trial << ", " << bands << " bands";
        EXPECT_TRUE(got.rgb == one.rgb) << "trial " << trial << ", " << bands << " bands";
      }
    }
  }
  // Both kinds of outcome were exercised.
  EXPECT_GT(refused, 0);
  EXPECT_GT(decoded, 0);
}

TEST(JpegBands, CmykIsRefusedByEveryPath) {
  // A 4-component Adobe CMYK file written by libjpeg.
  const int w = 300, h = 200;
  std::vector<uint8_t> cmyk(static_cast<size_t>(w) * h * 4, 0);
  for (size_t i = 0; i < cmyk.size(); ++i) cmyk[i] = static_cast<uint8_t>(i * 7);
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = w;
  cinfo.image_height = h;
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = cmyk.data() + static_cast<size_t>(cinfo.next_scanline) * w * 4;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  const std::vector<uint8_t> file(buf, buf + size);
  std::free(buf);
  const Outcome one = single(file);
  EXPECT_NE(one.refusal.find("CMYK"), std::string::npos) << one.refusal;
  for (int bands = 2; bands <= 8; ++bands) EXPECT_EQ(banded(file, bands).refusal, one.refusal);
  EXPECT_EQ(
      outcome([&] { return media::decode_jpeg(file.data(), file.size(), kLimit, 8); }).refusal,
      one.refusal);
}

// The fixtures' baseline JPEGs (Cloudflare's reference resized them): with the server's thread
// budget, and with every band count, the decode + resize gives the reference's bytes.
TEST(JpegBands, FixtureJpegsMatchTheReference) {
  const std::string dir = std::string(CLEF_SOURCE_DIR) + "/tests/golden/media/";
  auto resized = clef::model::SafetensorsFile::open(dir + "tiny-r2m.media-resized.safetensors");
  const auto all = clef::testing::read_jsonl(dir + "encode-media-tiny-r2m.jsonl");
  int compared = 0;
  for (size_t n = 0; n < all.size(); ++n) {
    const clef::json::Value& request = *all[n].find("request");
    const clef::json::Value* images = request.find("images");
    if (!images) continue;
    for (size_t k = 0; k < images->items().size(); ++k) {
      const auto* t = resized->find("case" + std::to_string(n) + "_image" + std::to_string(k));
      if (!t) continue;
      media::ImagePlan plan;
      try {
        plan = media::plan_image(images->items()[k].as_string(),
                                 clef::testing::image_budget(request), kLimit);
      } catch (const media::MediaError&) {
        continue;  // a refused case (processor_test checks those)
      }
      if (plan.file.format != media::ImageFormat::Jpeg) continue;
      SCOPED_TRACE("case " + std::to_string(n) + " image " + std::to_string(k));
      const std::vector<uint8_t> want(t->data, t->data + t->nbytes);
      EXPECT_TRUE(media::resized_image(plan, kLimit, media::threads_per_item(1)) == want);
      EXPECT_TRUE(media::resized_image(plan, kLimit, 8) == want);
      std::vector<uint8_t> one;
      ASSERT_TRUE(one_pass(plan.file.bytes, one));
      for (int bands = 2; bands <= 8; ++bands) {
        const Outcome got = banded(plan.file.bytes, bands);
        EXPECT_TRUE(got.rgb == one) << bands << " bands";
      }
      ++compared;
    }
  }
  // The fixtures hold five JPEG cases with resized images (three baseline ones large enough for
  // bands: 449x330, 700x500, 700x900).
  EXPECT_GE(compared, 4);
}

// The images of one request share the threads: together within parallel_items' bound.
TEST(JpegBands, ThreadBudgetIsShared) {
  const unsigned threads = media::parallel_threads();
  EXPECT_GE(threads, 1u);
  EXPECT_LE(threads, 8u);
  EXPECT_EQ(media::threads_per_item(1), threads);
  for (size_t n = 1; n <= 20; ++n) {
    EXPECT_GE(media::threads_per_item(n), 1u) << n;
    if (n <= threads) {
      EXPECT_LE(media::threads_per_item(n) * n, threads) << n;
    } else {
      EXPECT_EQ(media::threads_per_item(n), 1u) << n;
    }
  }
  EXPECT_EQ(media::threads_per_item(4, 1), 1u);
}

}  // namespace

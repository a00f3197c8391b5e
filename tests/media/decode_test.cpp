// Decoder edge cases (docs/spec/media.md §1-2): malformed, truncated and huge-dimension files are
// refused with MediaError, huge ones from the header before any pixel buffer exists; URLs are never
// fetched; base64 and data URI forms.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "media/image.h"
#include "support/lossless_round_trip.h"

namespace {

namespace media = clef::media;

constexpr uint64_t kLimit = 16777216;

std::vector<uint8_t> seed(const std::string& name) {
  std::ifstream in(std::string(CLEF_SOURCE_DIR) + "/fuzz/corpus/image/" + name, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string base64(const std::vector<uint8_t>& b) {
  return media::base64_encode(b);
}

void put_be16(std::vector<uint8_t>& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v >> 8);
  b[at + 1] = static_cast<uint8_t>(v);
}

void put_be32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

std::string refusal(const std::vector<uint8_t>& bytes, uint64_t limit = kLimit) {
  try {
    media::decode_image(media::identify_image(bytes), limit);
  } catch (const media::MediaError& e) {
    return e.what();
  }
  return "";
}

TEST(MediaDecode, SeedsDecodeToTheirHeaderSize) {
  for (const char* name :
       {"png_tiny.png", "png_palette.png", "png_gray.png", "jpeg_small.jpg", "webp_lossy.webp"}) {
    const media::EncodedImage file = media::identify_image(seed(name));
    const media::ImageInfo info = media::probe_image(file, kLimit);
    const media::Image img = media::decode_image(file, kLimit);
    EXPECT_EQ(img.width, info.width) << name;
    EXPECT_EQ(img.height, info.height) << name;
    EXPECT_EQ(img.rgb.size(), static_cast<size_t>(info.width) * info.height * 3) << name;
  }
  EXPECT_EQ(media::identify_image(seed("png_tiny.png")).format, media::ImageFormat::Png);
  EXPECT_EQ(media::identify_image(seed("jpeg_small.jpg")).format, media::ImageFormat::Jpeg);
  EXPECT_EQ(media::identify_image(seed("webp_lossy.webp")).format, media::ImageFormat::Webp);
}

// A header claiming 100000 x 100000 (3e10 bytes of RGB) is refused from the header: decoding it
// would throw std::bad_alloc or exhaust memory, not MediaError.
// decode_image_into (what an image already at its target size is decoded with, straight into the
// request's frame) writes exactly decode_image's pixels for each format, at odd sizes and with a
// banded JPEG; a buffer of another size, or a corrupt file, is refused with MediaError.
TEST(MediaDecode, IntoTheCallersBufferMatchesDecodeImage) {
  for (const auto& [w, h] : {std::pair{33, 17}, std::pair{512, 384}, std::pair{1024, 1024}}) {
    const media::Image src = media::synthetic_image(w, h, 7);
    const std::vector<std::pair<media::ImageFormat, std::vector<uint8_t>>> files = {
        {media::ImageFormat::Png, media::encode_png(src)},
        {media::ImageFormat::Jpeg, media::encode_jpeg(src, 90)},
        {media::ImageFormat::Webp, media::encode_webp(src, 80)}};
    for (const auto& [fmt, bytes] : files) {
      SCOPED_TRACE(std::string(media::format_name(fmt)) + " " + std::to_string(w) + "x" +
                   std::to_string(h));
      const media::EncodedImage file = media::identify_image(bytes);
      ASSERT_EQ(file.format, fmt);
      for (unsigned threads : {1u, 4u}) {
        const media::Image want = media::decode_image(file, kLimit, threads);
        std::vector<uint8_t> got(want.rgb.size(), 0xA5);  // poisoned: every byte must be written
        media::decode_image_into(file, kLimit, got.data(), got.size(), threads);
        EXPECT_EQ(got, want.rgb) << "threads " << threads;
        EXPECT_THROW(media::decode_image_into(file, kLimit, got.data(), got.size() - 3, threads),
                     media::MediaError);
      }
      EXPECT_THROW(media::decode_image_into(file, uint64_t(w) * h - 1, nullptr, size_t(w) * h * 3),
                   media::MediaError);  // over the pixel limit: refused before a byte is written
      std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + bytes.size() / 2);
      std::vector<uint8_t> out(size_t(w) * h * 3);
      EXPECT_THROW(
          media::decode_image_into(media::identify_image(cut), kLimit, out.data(), out.size()),
          media::MediaError);
    }
  }
}

TEST(MediaDecode, HugeDimensionsAreRefusedBeforeDecoding) {
  std::vector<uint8_t> png = seed("png_tiny.png");
  put_be32(png, 16, 100000);
  put_be32(png, 20, 100000);
  EXPECT_NE(refusal(png).find("10000000000 pixels; the limit is 16777216"), std::string::npos)
      << refusal(png);

  std::vector<uint8_t> jpeg = seed("jpeg_small.jpg");
  ASSERT_EQ(jpeg[158], 0xFF);
  ASSERT_EQ(jpeg[159], 0xC0);  // SOF0: length, precision, height, width
  put_be16(jpeg, 163, 65000);
  put_be16(jpeg, 165, 65000);
  EXPECT_NE(refusal(jpeg).find("4225000000 pixels"), std::string::npos) << refusal(jpeg);

  std::vector<uint8_t> webp = seed("webp_lossy.webp");
  ASSERT_EQ(webp[23], 0x9D);  // VP8 start code, then 14-bit width and height (little-endian)
  webp[26] = webp[28] = 0xFF;
  webp[27] = webp[29] = 0x3F;
  EXPECT_NE(refusal(webp).find("268402689 pixels"), std::string::npos) << refusal(webp);

  // And a limit below a real image's size refuses it too.
  EXPECT_NE(refusal(seed("png_tiny.png"), 100).find("the limit is 100"), std::string::npos);
}

TEST(MediaDecode, TruncatedAndCorruptFilesAreRefused) {
  for (const char* name :
       {"png_tiny.png", "png_palette.png", "jpeg_small.jpg", "webp_lossy.webp"}) {
    const std::vector<uint8_t> full = seed(name);
    for (size_t keep : {full.size() / 2, full.size() - 20, size_t{40}}) {
      const std::vector<uint8_t> cut(full.begin(), full.begin() + keep);
      EXPECT_NE(refusal(cut), "") << name << " cut to " << keep;
    }
  }
  // Corrupt image data after a valid header.
  std::vector<uint8_t> png = seed("png_tiny.png");
  for (size_t i = 60; i < png.size() - 20; ++i) png[i] ^= 0x5A;
  EXPECT_NE(refusal(png).find("malformed PNG"), std::string::npos);
  std::vector<uint8_t> magic_only = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  EXPECT_NE(refusal(magic_only).find("malformed PNG"), std::string::npos);
  EXPECT_NE(refusal({0xFF, 0xD8, 0xFF, 0xE0, 0, 0}).find("malformed JPEG"), std::string::npos);
  EXPECT_NE(refusal({'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'}).find("malformed WebP"),
            std::string::npos);
}

TEST(MediaDecode, SixteenBitPngAndOtherFormatsAreRefused) {
  std::vector<uint8_t> png = seed("png_gray.png");
  png[24] = 16;  // IHDR bit depth
  EXPECT_NE(refusal(png).find("16-bit PNG"), std::string::npos) << refusal(png);
  EXPECT_THROW(media::identify_image({'G', 'I', 'F', '8', '9', 'a'}), media::MediaError);
  EXPECT_THROW(media::identify_image({'I', 'I', '*', 0, 8, 0}), media::MediaError);
  EXPECT_THROW(media::identify_image({'B', 'M', 0, 0}), media::MediaError);
  EXPECT_THROW(media::identify_image({}), media::MediaError);
  EXPECT_THROW(media::identify_image({'h', 'e', 'l', 'l', 'o'}), media::MediaError);
}

TEST(MediaDecode, RequestStrings) {
  const std::vector<uint8_t> png = seed("png_tiny.png");
  const std::string b64 = base64(png);
  EXPECT_EQ(media::parse_image_string("data:image/png;base64," + b64).bytes, png);
  EXPECT_EQ(media::parse_image_string("DATA:IMAGE/PNG;BASE64," + b64).bytes, png);
  EXPECT_EQ(media::parse_image_string(b64).bytes, png);  // raw base64, sniffed
  // The format comes from the bytes, as in the reference: a mislabelled type still decodes.
  EXPECT_EQ(media::parse_image_string("data:image/jpeg;base64," + b64).format,
            media::ImageFormat::Png);
  // Line-wrapped base64 (MIME style) and missing padding.
  std::string wrapped;
  for (size_t i = 0; i < b64.size(); i += 76) wrapped += b64.substr(i, 76) + "\r\n";
  EXPECT_EQ(media::parse_image_string(wrapped).bytes, png);
  EXPECT_EQ(media::base64_decode("YWI"), (std::vector<uint8_t>{'a', 'b'}));
  EXPECT_EQ(media::base64_decode("YWI="), (std::vector<uint8_t>{'a', 'b'}));
  EXPECT_THROW(media::base64_decode("YWI=x"), media::MediaError);
  EXPECT_THROW(media::base64_decode("Y"), media::MediaError);
  EXPECT_EQ(media::base64_decode("YW=="), (std::vector<uint8_t>{'a'}));
  EXPECT_THROW(media::base64_decode("YWI=="), media::MediaError);
}

TEST(MediaDecode, UrlsAndOtherSchemesAreNeverFetched) {
  for (const char* url : {"http://example.com/a.png", "https://example.com/a.png",
                          "file:///etc/passwd", "ftp://x/y.png", "s3://bucket/key"}) {
    try {
      media::parse_image_string(url);
      ADD_FAILURE() << url;
    } catch (const media::MediaError& e) {
      EXPECT_NE(std::string(e.what()).find("URLs are not supported"), std::string::npos) << url;
    }
  }
  for (const char* uri : {"data:image/gif;base64,R0lGODlh", "data:image/png,iVBORw0KGgo",
                          "data:text/plain;base64,aGk=", "data:image/png;base64"}) {
    EXPECT_THROW(media::parse_image_string(uri), media::MediaError) << uri;
  }
  EXPECT_THROW(media::parse_image_string("data:image/png;base64,"), media::MediaError);
}

// The encoder against RFC 4648 §10's test vectors, and its output back through the decoder.
TEST(MediaBase64, EncodeMatchesRfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    const std::string p(plain);
    const std::vector<uint8_t> bytes(p.begin(), p.end());
    EXPECT_EQ(media::base64_encode(bytes), coded) << plain;
    EXPECT_EQ(media::base64_decode(coded), bytes) << coded;
  }
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[i] = static_cast<uint8_t>(255 - i);
  EXPECT_EQ(media::base64_decode(media::base64_encode(all)), all);
}

// encode_png writes what the PNG decoder reads back pixel for pixel, at odd sizes too; a wrong
// buffer size is refused.
TEST(MediaPng, EncodeRoundTripsThroughTheDecoder) {
  clef::testing::expect_lossless_round_trip(
      [](const media::Image& img) { return media::encode_png(img); }, media::ImageFormat::Png,
      kLimit);
  media::Image bad;
  bad.width = 4;
  bad.height = 4;
  bad.rgb.resize(5);
  EXPECT_THROW(media::encode_png(bad), media::MediaError);
}

// Whitespace, padding and a bad symbol at every offset of a string longer than the four-symbol fast
// path's step: the bytes are the encoded ones, the errors name the right offset.
TEST(MediaBase64, SeparatorsAndErrorsAtEveryOffset) {
  std::vector<uint8_t> bytes(31);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 53 + 7);
  const std::string text = media::base64_encode(bytes);  // 42 symbols and "=="
  for (size_t at = 0; at <= text.size(); ++at) {
    for (const char* ws : {" ", "\n", "\r\n", "\t "}) {
      std::string spaced = text;
      spaced.insert(at, ws);
      EXPECT_EQ(media::base64_decode(spaced), bytes) << at;
    }
    if (at < 42) {
      std::string broken = text;
      broken[at] = '*';
      try {
        media::base64_decode(broken);
        ADD_FAILURE() << "accepted a '*' at " << at;
      } catch (const media::MediaError& e) {
        EXPECT_NE(std::string(e.what()).find("offset " + std::to_string(at)), std::string::npos)
            << e.what();
      }
    }
  }
  // Unpadded is accepted; a cut leaving one symbol of a group or data after '=' is refused.
  ASSERT_EQ(text.substr(42), "==");
  EXPECT_EQ(media::base64_decode(text.substr(0, 42)), bytes);
  EXPECT_THROW(media::base64_decode(text.substr(0, 43)), media::MediaError);  // half the padding
  EXPECT_THROW(media::base64_decode(text.substr(0, 41)), media::MediaError);
  EXPECT_THROW(media::base64_decode(text.substr(0, 42) + "=A"), media::MediaError);
}

}  // namespace

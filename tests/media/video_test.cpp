// Video files (src/media/decode_video.cpp): lossless files written here with Debian's FFmpeg
// decode back to the exact RGB frames, and every bad file is a MediaError before anything large
// is decoded or allocated.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "media/decode_video.h"
#include "media/image.h"
#include "support/encoder_usable.h"
#include "support/video_encoder.h"

using clef::media::decode_video_frames;
using clef::media::EncodedVideo;
using clef::media::identify_video;
using clef::media::MediaError;
using clef::media::parse_video_string;
using clef::media::probe_video;
using clef::media::VideoLimits;
using clef::testsupport::encode_video;
using clef::testsupport::encoder_usable;
using clef::testsupport::pattern_frames;
using clef::testsupport::RgbFrames;

namespace {

struct Writer {
  const char* muxer;
  const char* encoder;
};
const Writer kWriters[] = {{"mp4", "libx264rgb"}, {"matroska", "ffv1"}, {"webm", "libvpx-vp9"}};

#define REQUIRE_ENCODER(name) \
  if (!encoder_usable(name)) GTEST_SKIP() << "FFmpeg encoder " << name << " is missing"

EncodedVideo file(const RgbFrames& f, int fps, const Writer& w) {
  return identify_video(encode_video(f, fps, w.muxer, w.encoder));
}

std::string refusal(const EncodedVideo& v, const VideoLimits& limits = {}) {
  try {
    probe_video(v, limits);
  } catch (const MediaError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST(VideoFile, LosslessFilesDecodeToTheirExactFrames) {
  struct Case {
    int frames, width, height, fps;
  };
  for (const Writer& w : kWriters) {
    if (!encoder_usable(w.encoder)) continue;
    for (const Case c : {Case{6, 64, 96, 30}, Case{9, 33, 50, 4}}) {
      SCOPED_TRACE(std::string(w.muxer) + "/" + w.encoder + " " + std::to_string(c.width) + "x" +
                   std::to_string(c.height));
      const RgbFrames f = pattern_frames(c.frames, c.width, c.height);
      const EncodedVideo v = file(f, c.fps, w);
      const auto info = probe_video(v, {});
      EXPECT_EQ(info.width, c.width);
      EXPECT_EQ(info.height, c.height);
      EXPECT_EQ(info.frames, c.frames);
      EXPECT_DOUBLE_EQ(info.fps, c.fps);
      std::vector<int> all;
      for (int i = 0; i < c.frames; ++i) all.push_back(i);
      const auto images = decode_video_frames(v, {}, all);
      ASSERT_EQ(images.size(), static_cast<size_t>(c.frames));
      for (int i = 0; i < c.frames; ++i) EXPECT_TRUE(images[i].rgb == f.rgb[i]) << "frame " << i;
      // Only the sampled frames come back, in order.
      const auto some = decode_video_frames(v, {}, {1, c.frames - 1});
      ASSERT_EQ(some.size(), 2u);
      EXPECT_TRUE(some[0].rgb == f.rgb[1]);
      EXPECT_TRUE(some[1].rgb == f.rgb[c.frames - 1]);
    }
  }
}

TEST(VideoFile, DataUrisAndSniffing) {
  REQUIRE_ENCODER("ffv1");
  const auto bytes = encode_video(pattern_frames(2, 32, 32), 10, "matroska", "ffv1");
  const std::string b64 = clef::testsupport::base64(bytes);
  EXPECT_EQ(parse_video_string("data:video/webm;base64," + b64).container,
            clef::media::VideoContainer::Matroska);
  EXPECT_EQ(parse_video_string(b64).bytes, bytes);  // raw base64, sniffed
  auto refused = [](const std::string& s) {
    try {
      parse_video_string(s);
    } catch (const MediaError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(refused("data:image/png;base64," + b64).find("unsupported data URI"),
            std::string::npos);
  EXPECT_NE(refused("https://example.com/a.mp4").find("URLs are not supported"), std::string::npos);
  // AVI and raw bytes are not containers we open.
  EXPECT_NE(refused(clef::testsupport::base64(
                        {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'A', 'V', 'I', ' ', 'L', 'I', 'S', 'T'}))
                .find("AVI"),
            std::string::npos);
  EXPECT_NE(refused(clef::testsupport::base64({0, 0, 1, 0xB3, 1, 2, 3, 4, 5, 6, 7, 8}))
                .find("not an MP4"),
            std::string::npos);
}

TEST(VideoFile, BrokenFilesAreRefused) {
  REQUIRE_ENCODER("libx264rgb");
  const RgbFrames f = pattern_frames(6, 64, 96);
  const auto mp4 = encode_video(f, 30, "mp4", "libx264rgb");
  // Truncated: every cut of the file is refused (or, if the cut keeps all frames, decodes them).
  // (The MP4 muxer writes its index, moov, last; a Matroska file has its frames last.)
  for (size_t cut : {mp4.size() / 4, mp4.size() / 2, mp4.size() - 300}) {
    SCOPED_TRACE("mp4 cut at " + std::to_string(cut));
    EncodedVideo v{clef::media::VideoContainer::Mp4, {mp4.begin(), mp4.begin() + cut}};
    EXPECT_NE(refusal(v), "(accepted)");
  }
  if (clef::testsupport::have_encoder("ffv1")) {
    const auto mkv = encode_video(f, 30, "matroska", "ffv1");
    int refused = 0;
    for (size_t cut : {mkv.size() / 2, mkv.size() * 3 / 4, mkv.size() - 100}) {
      SCOPED_TRACE("mkv cut at " + std::to_string(cut));
      EncodedVideo v{clef::media::VideoContainer::Matroska, {mkv.begin(), mkv.begin() + cut}};
      if (refusal(v) != "(accepted)") {
        ++refused;
        continue;
      }
      // Accepted only if the cut removed nothing but the index after the frames (the Cues):
      // then every frame is there and exact.
      ASSERT_EQ(probe_video(v, {}).frames, 6);
      const auto images = decode_video_frames(v, {}, {0, 1, 2, 3, 4, 5});
      for (int i = 0; i < 6; ++i) EXPECT_TRUE(images[i].rgb == f.rgb[i]) << "frame " << i;
    }
    EXPECT_GE(refused, 2);  // the cuts inside the frames
  }
  // Random bytes behind an MP4 header.
  std::vector<uint8_t> junk = {0, 0, 0, 0x18, 'f', 't', 'y', 'p', 'i', 's', 'o', 'm'};
  uint32_t x = 12345;
  for (int i = 0; i < 4000; ++i) {
    x = x * 1103515245u + 12345u;
    junk.push_back(static_cast<uint8_t>(x >> 16));
  }
  EXPECT_NE(refusal(identify_video(junk)), "(accepted)");
  // One frame.
  const auto one = identify_video(encode_video(pattern_frames(1, 64, 96), 30, "mp4", "libx264rgb"));
  EXPECT_NE(refusal(one).find("at least 2 frames"), std::string::npos) << refusal(one);
  // Over each limit, refused from the probe.
  const EncodedVideo v = identify_video(mp4);
  VideoLimits frames_limit;
  frames_limit.max_frames = 5;
  EXPECT_NE(refusal(v, frames_limit).find("--max-video-frames"), std::string::npos);
  VideoLimits pixel_limit;
  pixel_limit.max_pixels = 64 * 96 - 1;
  EXPECT_NE(refusal(v, pixel_limit).find("--max-image-pixels"), std::string::npos);
  VideoLimits seconds_limit;
  seconds_limit.max_seconds = 0.1;  // the file lasts 0.2 s
  EXPECT_NE(refusal(v, seconds_limit).find("--max-video-seconds"), std::string::npos);
}

TEST(VideoFile, AHugeHeaderAllocatesNothing) {
  REQUIRE_ENCODER("ffv1");
  // A real 256x256 FFV1 Matroska file whose PixelWidth / PixelHeight elements (IDs 0xB0, 0xBA,
  // two-byte values 0x0100) are rewritten to 65535: the header claims 65535x65535 frames.
  auto bytes = encode_video(pattern_frames(2, 256, 256), 10, "matroska", "ffv1");
  int patched = 0;
  for (size_t i = 0; i + 4 <= bytes.size(); ++i)
    if ((bytes[i] == 0xB0 || bytes[i] == 0xBA) && bytes[i + 1] == 0x82 && bytes[i + 2] == 0x01 &&
        bytes[i + 3] == 0x00) {
      bytes[i + 2] = bytes[i + 3] = 0xFF;
      ++patched;
    }
  ASSERT_EQ(patched, 2);
  const std::string why = refusal(identify_video(bytes));
  EXPECT_NE(why.find("65535x65535"), std::string::npos) << why;
  EXPECT_NE(why.find("--max-image-pixels"), std::string::npos) << why;
}

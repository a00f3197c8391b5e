// The data form of `videos` end to end (`clefserve encode` on tiny-r2m): a lossless MP4 / Matroska
// / WebM file written here must encode exactly as the frames form of the same frames and fps (token
// ids, spans, token types, grids, pixel sha256, positions), since both reach the same pixels, and
// `clefserve decide` on the CPU engine must give the same answer.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "json/value.h"
#include "support/cli_runner.h"
#include "support/encoder_usable.h"
#include "support/parse_json.h"
#include "support/video_encoder.h"

using clef::json::Value;
namespace ts = clef::testsupport;

namespace {

const std::string kRelease =
    std::string("--model ") + CLEF_SOURCE_DIR + "/tests/golden/models/tiny-r2m";

using clef::testing::parse_or_die;

std::string request(const std::string& videos, const std::string& kwargs = "") {
  return R"({"model":"clef-flash","state":"the incident report shows an outage",)"
         R"("questions":{"q0":{"type":"choice","instructions":"What kind of document is this?",)"
         R"("criteria":{"invoice":"A bill","photo":"A photo","chart":"A chart"}}},"videos":)" +
         videos + (kwargs.empty() ? "" : ",\"media_kwargs\":" + kwargs) + "}";
}

std::string frames_form(const ts::RgbFrames& f, int fps) {
  std::string s = "[{\"fps\":" + std::to_string(fps) + ",\"frames\":[";
  for (size_t i = 0; i < f.rgb.size(); ++i)
    s += std::string(i ? "," : "") + "\"data:image/png;base64," +
         ts::base64(ts::encode_png(f.rgb[i], f.width, f.height)) + "\"";
  return s + "]}]";
}

std::string data_form(const std::vector<uint8_t>& file, const char* mime) {
  return std::string("[{\"data\":\"data:") + mime + ";base64," + ts::base64(file) + "\"}]";
}

}  // namespace

TEST(EncodeVideoFile, SameEncodingAsTheFramesForm) {
  struct Writer {
    const char *muxer, *encoder, *mime;
  };
  struct Case {
    int frames, width, height, fps;
    std::string kwargs;
  };
  const Writer writers[] = {{"mp4", "libx264rgb", "video/mp4"},
                            {"matroska", "ffv1", "video/x-matroska"},
                            {"webm", "libvpx-vp9", "video/webm"}};
  const Case cases[] = {{6, 64, 96, 30, ""},
                        {9, 33, 50, 4, ""},
                        {9, 33, 50, 4, R"({"fps":null,"num_frames":5})"},
                        {6, 64, 96, 30, R"({"fps":8})"}};
  int compared = 0, decided = 0;
  for (const Writer& w : writers) {
    if (!ts::encoder_usable(w.encoder)) continue;
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(w.muxer) + " " + std::to_string(c.frames) + " frames " +
                   std::to_string(c.width) + "x" + std::to_string(c.height) + " fps " +
                   std::to_string(c.fps) + " " + c.kwargs);
      const ts::RgbFrames f = ts::pattern_frames(c.frames, c.width, c.height);
      const auto file = ts::encode_video(f, c.fps, w.muxer, w.encoder);
      const auto a =
          ts::run_clefserve("encode " + kRelease, request(frames_form(f, c.fps), c.kwargs));
      const auto b =
          ts::run_clefserve("encode " + kRelease, request(data_form(file, w.mime), c.kwargs));
      ASSERT_EQ(a.status, 0) << a.out.substr(0, 400);
      ASSERT_EQ(b.status, 0) << b.out.substr(0, 400);
      const Value va = parse_or_die(a.out), vb = parse_or_die(b.out);
      ASSERT_NE(va.find("pixel_values_videos"), nullptr) << a.out.substr(0, 400);
      for (const char* key : {"input_ids", "mm_token_type_ids", "video_grid_thw",
                              "pixel_values_videos", "position_ids", "questions"}) {
        ASSERT_NE(vb.find(key), nullptr) << key;
        EXPECT_EQ(clef::json::dumps(*va.find(key)), clef::json::dumps(*vb.find(key))) << key;
      }
      EXPECT_EQ(clef::json::dumps(va), clef::json::dumps(vb));
      ++compared;
      if (&c != &cases[0]) continue;
      // The CPU engine (vision tower + backbone + head of tiny-r2m): the same answer, bit for bit
      // (--raw: unrounded probabilities too), since its inputs above are equal.
      const std::string decide = "decide " + kRelease + " --device cpu --raw";
      const auto da = ts::run_clefserve(decide, request(frames_form(f, c.fps), c.kwargs));
      const auto db = ts::run_clefserve(decide, request(data_form(file, w.mime), c.kwargs));
      ASSERT_EQ(da.status, 0) << da.out.substr(0, 400);
      ASSERT_EQ(db.status, 0) << db.out.substr(0, 400);
      EXPECT_NE(da.out.find("\"answers\""), std::string::npos) << da.out.substr(0, 400);
      EXPECT_EQ(da.out, db.out);
      ++decided;
    }
  }
  EXPECT_GT(compared, 0);
  EXPECT_EQ(decided * 4, compared);
}

TEST(EncodeVideoFile, RefusalsAre422WithTheirReason) {
  if (!ts::encoder_usable("libx264rgb")) GTEST_SKIP() << "FFmpeg encoder libx264rgb is missing";
  const auto one = ts::encode_video(ts::pattern_frames(1, 64, 96), 30, "mp4", "libx264rgb");
  const auto six = ts::encode_video(ts::pattern_frames(6, 64, 96), 30, "mp4", "libx264rgb");
  struct Case {
    std::string videos, args, says;
  };
  const Case cases[] = {
      {data_form(one, "video/mp4"), "", "at least 2 frames"},
      {data_form({six.begin(), six.begin() + six.size() / 2}, "video/mp4"), "", "video 0"},
      {data_form(six, "image/png"), "", "unsupported data URI"},
      {data_form(six, "video/mp4"), " --max-video-frames 5", "--max-video-frames"},
      {data_form(six, "video/mp4"), " --max-video-seconds 0.1", "--max-video-seconds"},
      {data_form(six, "video/mp4"), " --max-image-pixels 1000", "--max-image-pixels"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.says);
    const auto r = ts::run_clefserve("encode " + kRelease + c.args, request(c.videos));
    EXPECT_EQ(r.status, 2) << r.out.substr(0, 400);
    EXPECT_NE(r.out.find(c.says), std::string::npos) << r.out.substr(0, 400);
  }
}

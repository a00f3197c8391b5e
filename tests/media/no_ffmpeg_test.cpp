// A build without FFmpeg (CLEF_FFMPEG=OFF; compiled only there): a video file is refused with a
// MediaError that says why and names the frames form, at probe and at decode; the container is
// still identified first (a non-video is refused as before).
#include <gtest/gtest.h>

#include <string>

#include "media/decode_video.h"

namespace {

namespace media = clef::media;

TEST(MediaWithoutFfmpeg, VideoFilesAreRefusedClearly) {
  // The smallest ISO BMFF header: a box of size 12, "ftyp", brand "isom".
  std::vector<uint8_t> mp4 = {0, 0, 0, 12, 'f', 't', 'y', 'p', 'i', 's', 'o', 'm'};
  const media::EncodedVideo v = media::identify_video(mp4);
  EXPECT_EQ(v.container, media::VideoContainer::Mp4);
  try {
    media::probe_video(v, {});
    ADD_FAILURE() << "probed a video file without FFmpeg";
  } catch (const media::MediaError& e) {
    EXPECT_NE(std::string(e.what()).find("without FFmpeg"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("frames"), std::string::npos) << e.what();
  }
  EXPECT_THROW(media::decode_video_frames(v, {}, {0}), media::MediaError);
  EXPECT_THROW(media::identify_video({'n', 'o', 'p', 'e'}), media::MediaError);
}

}  // namespace

// Video request strings -> container files (no FFmpeg needed): the data URI / raw base64 forms and
// the container sniffed from the magic bytes. Decoding is media/ffmpeg (or media/no_ffmpeg).
#include <utility>

#include "media/data_uri.h"
#include "media/decode_video.h"

namespace clef::media {

EncodedVideo parse_video_string(std::string_view text) {
  return identify_video(media_string_bytes(text,
                                           {"video/mp4;base64", "video/webm;base64",
                                            "video/x-matroska;base64", "video/quicktime;base64"},
                                           "video",
                                           "data:video/{mp4,webm,x-matroska,quicktime};base64,"));
}

EncodedVideo identify_video(std::vector<uint8_t> bytes) {
  EncodedVideo out;
  if (has_magic(bytes, "ftyp", 4, 4))
    out.container = VideoContainer::Mp4;
  else if (has_magic(bytes, "\x1A\x45\xDF\xA3", 4))
    out.container = VideoContainer::Matroska;
  else if (has_magic(bytes, "RIFF", 4) && has_magic(bytes, "AVI ", 4, 8))
    throw MediaError("AVI files are not supported (MP4 or Matroska/WebM)");
  else
    throw MediaError("not an MP4 or Matroska/WebM video file");
  out.bytes = std::move(bytes);
  return out;
}

}  // namespace clef::media

// A build without FFmpeg (CLEF_FFMPEG=OFF: a minimal deployment, or a machine whose FFmpeg is
// another major version): video files are refused with a clear 422 before anything is decoded;
// the frames form of a video needs no FFmpeg and works as ever.
#include "media/decode_video.h"

namespace clef::media {
namespace {

[[noreturn]] void refuse() {
  throw MediaError(
      "video files (MP4/WebM) are not supported by this build of clefserve (built without "
      "FFmpeg): send the video as {\"frames\": [...], \"fps\": ...}");
}

}  // namespace

VideoInfo probe_video(const EncodedVideo&, const VideoLimits&) {
  refuse();
}

std::vector<Image> decode_video_frames(const EncodedVideo&, const VideoLimits&,
                                       const std::vector<int>&) {
  refuse();
}

}  // namespace clef::media

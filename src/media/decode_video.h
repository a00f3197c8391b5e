// Video files (docs/api.md "Images and videos"): an MP4 or Matroska/WebM file from a request's
// `{"data": ...}` -> the frame count, frame rate and size from its headers and packets (nothing
// decoded), then only the sampled frames decoded to RGB uint8. FFmpeg (libavformat, libavcodec,
// libswscale) reads the bytes in memory only: no file name, URL or other protocol is ever opened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "media/image.h"

namespace clef::media {

enum class VideoContainer { Mp4, Matroska };

struct EncodedVideo {
  VideoContainer container = VideoContainer::Mp4;
  std::vector<uint8_t> bytes;
};

struct VideoLimits {
  uint64_t max_pixels = 16777216;  // width x height of a frame (--max-image-pixels)
  size_t max_frames = 768;         // frames in the file (--max-video-frames)
  double max_seconds = 600;        // duration (--max-video-seconds)
};

struct VideoInfo {
  int width = 0;
  int height = 0;
  int frames = 0;  // video packets in the file (one per frame for the accepted codecs)
  double fps = 0;  // the stream's average frame rate
};

// "data:video/{mp4,webm,x-matroska,quicktime};base64,..." or raw base64 of such a file; the
// container is sniffed from the bytes (ISO BMFF "ftyp" box, EBML header). Throws MediaError for
// URLs, other data URI types, bad base64, and anything that is not MP4/MOV or Matroska/WebM.
EncodedVideo parse_video_string(std::string_view text);
EncodedVideo identify_video(std::vector<uint8_t> bytes);

// Headers and packets only: refuses (MediaError) no video stream, a codec FFmpeg cannot decode,
// a corrupt or truncated file, an unknown frame rate, fewer than 2 frames, and a file over any
// limit, each before a frame is decoded (a header claiming 100000x100000 allocates nothing).
VideoInfo probe_video(const EncodedVideo& video, const VideoLimits& limits);

// Decodes the file in order and keeps the frames at `indices` (ascending, no repeats), as RGB
// uint8; stops after the last one. Conversion (swscale, SWS_BICUBIC | SWS_ACCURATE_RND |
// SWS_FULL_CHR_H_INT, same size): YUV with the stream's tagged matrix and range (untagged: BT.601
// limited range); RGB/GBR sources are copied exactly. Throws MediaError (a frame that does not
// decode, a size change mid-stream, fewer frames than the packets promised).
std::vector<Image> decode_video_frames(const EncodedVideo& video, const VideoLimits& limits,
                                       const std::vector<int>& indices);

}  // namespace clef::media

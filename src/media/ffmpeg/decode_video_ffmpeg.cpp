// Video files through Debian's FFmpeg (libavformat / libavcodec / libswscale): the header probe
// and the frame decoder behind media/decode_video.h (built with CLEF_FFMPEG=ON, the default).
#include "media/decode_video.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libavutil/mem.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

namespace clef::media {
namespace {

// The demuxers accepted: ISO BMFF (mp4/mov family) and Matroska/WebM. Anything else FFmpeg could
// probe (AVI, raw streams, HLS/concat playlists that would open other resources) is refused.
constexpr const char* kFormats = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm";
constexpr int kIoBuffer = 32768;

std::string av_error(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(err, buf, sizeof buf);
  return buf;
}

// The request's bytes as an AVIOContext: reads and seeks inside the buffer, nothing else.
struct MemoryReader {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
};

int read_packet(void* opaque, uint8_t* buf, int buf_size) {
  auto* r = static_cast<MemoryReader*>(opaque);
  if (r->pos >= r->size) return AVERROR_EOF;
  const size_t n = std::min(static_cast<size_t>(buf_size), r->size - r->pos);
  std::memcpy(buf, r->data + r->pos, n);
  r->pos += n;
  return static_cast<int>(n);
}

int64_t seek(void* opaque, int64_t offset, int whence) {
  auto* r = static_cast<MemoryReader*>(opaque);
  const int64_t size = static_cast<int64_t>(r->size);
  if (whence & AVSEEK_SIZE) return size;
  int64_t base = 0;
  switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET:
      base = 0;
      break;
    case SEEK_CUR:
      base = static_cast<int64_t>(r->pos);
      break;
    case SEEK_END:
      base = size;
      break;
    default:
      return AVERROR(EINVAL);
  }
  if (offset > size || offset < -size) return AVERROR(EINVAL);
  const int64_t to = base + offset;
  if (to < 0 || to > size) return AVERROR(EINVAL);
  r->pos = static_cast<size_t>(to);
  return to;
}

void quiet_ffmpeg() {
  // FFmpeg logs every malformed input to stderr; a client's bad file is a 422, not a server log
  // line. (av_log's level is FFmpeg's own process-wide setting.)
  static const bool once = [] {
    av_log_set_level(AV_LOG_QUIET);
    return true;
  }();
  (void)once;
}

// One opened file: the demuxer over memory, its video stream and a decoder for it. Every FFmpeg
// object is owned here so that each error path frees all of them.
class Demuxer {
 public:
  Demuxer(const EncodedVideo& video, const VideoLimits& limits) {
    quiet_ffmpeg();
    reader_ = {video.bytes.data(), video.bytes.size(), 0};
    auto* buf = static_cast<unsigned char*>(av_malloc(kIoBuffer));
    if (!buf) throw MediaError("out of memory opening the video");
    o_.io = avio_alloc_context(buf, kIoBuffer, 0, &reader_, read_packet, nullptr, seek);
    if (!o_.io) {
      av_free(buf);
      throw MediaError("out of memory opening the video");
    }
    o_.fmt = avformat_alloc_context();
    if (!o_.fmt) throw MediaError("out of memory opening the video");
    o_.fmt->pb = o_.io;
    o_.fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    AVDictionary* opts = nullptr;
    av_dict_set(&opts, "format_whitelist", kFormats, 0);
    av_dict_set(&opts, "protocol_whitelist", "none", 0);  // no protocol: nothing but our bytes
    av_dict_set(&opts, "enable_drefs", "0", 0);           // mov: never follow data references
    const int err = avformat_open_input(&o_.fmt, nullptr, nullptr, &opts);
    av_dict_free(&opts);
    if (err < 0) {  // o_.fmt was freed and set to null by avformat_open_input
      if (err == AVERROR_INVALIDDATA)
        throw MediaError(
            "not a readable MP4 or Matroska/WebM file (corrupt, truncated, or "
            "another container)");
      throw MediaError("the video file could not be opened: " + av_error(err));
    }
    const int best = av_find_best_stream(o_.fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    if (best < 0) throw MediaError("the file has no video stream");
    stream_ = o_.fmt->streams[best];
    // The size from the container header, before anything is decoded (find_stream_info may decode
    // a frame).
    check_size(stream_->codecpar->width, stream_->codecpar->height, limits);
    const int si = avformat_find_stream_info(o_.fmt, nullptr);
    if (si < 0) throw MediaError("corrupt video: " + av_error(si));
    check_size(stream_->codecpar->width, stream_->codecpar->height, limits);
    codec_ = avcodec_find_decoder(stream_->codecpar->codec_id);
    if (!codec_)
      throw MediaError(std::string("unsupported video codec \"") +
                       avcodec_get_name(stream_->codecpar->codec_id) + "\"");
  }
  Demuxer(const Demuxer&) = delete;
  Demuxer& operator=(const Demuxer&) = delete;

  static void check_size(int w, int h, const VideoLimits& limits) {
    if (w <= 0 || h <= 0) throw MediaError("the video stream has no frame size");
    const uint64_t pixels = static_cast<uint64_t>(w) * static_cast<uint64_t>(h);
    if (pixels > limits.max_pixels)
      throw MediaError("video frames are " + std::to_string(w) + "x" + std::to_string(h) + " = " +
                       std::to_string(pixels) + " pixels; the limit is " +
                       std::to_string(limits.max_pixels) + " (--max-image-pixels)");
  }

  AVStream* stream() const { return stream_; }
  AVFormatContext* fmt() const { return o_.fmt; }

  AVPacket* packet() {
    if (!o_.pkt && !(o_.pkt = av_packet_alloc()))
      throw MediaError("out of memory reading the video");
    return o_.pkt;
  }

  // Reads the next packet of the video stream into packet(); false at the end of the file.
  bool next_packet() {
    AVPacket* p = packet();
    for (;;) {
      av_packet_unref(p);
      const int err = av_read_frame(o_.fmt, p);
      if (err == AVERROR_EOF) return false;
      if (err < 0) throw MediaError("corrupt or truncated video: " + av_error(err));
      if (p->stream_index != stream_->index) continue;
      if (p->flags & AV_PKT_FLAG_CORRUPT)
        throw MediaError("corrupt or truncated video (a damaged packet)");
      return true;
    }
  }

  AVCodecContext* decoder() {
    if (o_.dec) return o_.dec;
    o_.dec = avcodec_alloc_context3(codec_);
    if (!o_.dec) throw MediaError("out of memory opening the video decoder");
    int err = avcodec_parameters_to_context(o_.dec, stream_->codecpar);
    if (err < 0) throw MediaError("unsupported video stream: " + av_error(err));
    o_.dec->thread_count = 1;                  // no decoder threads per request
    o_.dec->err_recognition |= AV_EF_EXPLODE;  // a damaged frame is an error, not concealed
    err = avcodec_open2(o_.dec, codec_, nullptr);
    if (err < 0)
      throw MediaError(std::string("the \"") + codec_->name +
                       "\" decoder refused this stream: " + av_error(err));
    if (!(o_.frame = av_frame_alloc())) throw MediaError("out of memory decoding the video");
    return o_.dec;
  }
  AVFrame* frame() const { return o_.frame; }

  Image to_rgb(const AVFrame* f) {
    const auto src = static_cast<AVPixelFormat>(f->format);
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(src);
    if (!desc) throw MediaError("the video's pixel format is unknown");
    o_.sws = sws_getCachedContext(
        o_.sws, f->width, f->height, src, f->width, f->height, AV_PIX_FMT_RGB24,
        SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr);
    if (!o_.sws)
      throw MediaError(std::string("cannot convert the video's pixel format ") + desc->name +
                       " to RGB");
    if (!(desc->flags & AV_PIX_FMT_FLAG_RGB)) {
      // YUV: the matrix and range the stream is tagged with; untagged = BT.601 limited range.
      int cs = SWS_CS_ITU601;
      switch (f->colorspace) {
        case AVCOL_SPC_BT709:
          cs = SWS_CS_ITU709;
          break;
        case AVCOL_SPC_FCC:
          cs = SWS_CS_FCC;
          break;
        case AVCOL_SPC_SMPTE240M:
          cs = SWS_CS_SMPTE240M;
          break;
        case AVCOL_SPC_BT2020_NCL:
        case AVCOL_SPC_BT2020_CL:
          cs = SWS_CS_BT2020;
          break;
        default:
          break;
      }
      const int full = f->color_range == AVCOL_RANGE_JPEG ? 1 : 0;
      sws_setColorspaceDetails(o_.sws, sws_getCoefficients(cs), full, sws_getCoefficients(cs), 1, 0,
                               1 << 16, 1 << 16);
    }
    Image img;
    img.width = f->width;
    img.height = f->height;
    img.rgb.resize(static_cast<size_t>(f->width) * static_cast<size_t>(f->height) * 3);
    uint8_t* dst[4] = {img.rgb.data(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {f->width * 3, 0, 0, 0};
    const int rows = sws_scale(o_.sws, f->data, f->linesize, 0, f->height, dst, dst_stride);
    if (rows != f->height) throw MediaError("converting a video frame to RGB failed");
    return img;
  }

 private:
  // Owned FFmpeg objects, freed by their own destructor: it also runs when the Demuxer
  // constructor throws (a Demuxer destructor would not).
  struct Objects {
    AVIOContext* io = nullptr;
    AVFormatContext* fmt = nullptr;
    AVCodecContext* dec = nullptr;
    AVPacket* pkt = nullptr;
    AVFrame* frame = nullptr;
    SwsContext* sws = nullptr;
    Objects() = default;
    Objects(const Objects&) = delete;
    Objects& operator=(const Objects&) = delete;
    ~Objects() {
      avcodec_free_context(&dec);
      av_packet_free(&pkt);
      av_frame_free(&frame);
      sws_freeContext(sws);
      avformat_close_input(&fmt);  // does not free our io (AVFMT_FLAG_CUSTOM_IO)
      if (io) av_freep(&io->buffer);
      avio_context_free(&io);
    }
  };
  MemoryReader reader_;
  Objects o_;  // after reader_, which o_.io reads from
  AVStream* stream_ = nullptr;
  const AVCodec* codec_ = nullptr;
};

double rational(AVRational r) {
  return r.num > 0 && r.den > 0 ? static_cast<double>(r.num) / r.den : 0.0;
}

}  // namespace

VideoInfo probe_video(const EncodedVideo& video, const VideoLimits& limits) {
  Demuxer d(video, limits);
  AVStream* st = d.stream();
  VideoInfo info;
  info.width = st->codecpar->width;
  info.height = st->codecpar->height;
  info.fps = rational(st->avg_frame_rate);
  if (info.fps <= 0) info.fps = rational(st->r_frame_rate);
  if (!(info.fps > 0) || !std::isfinite(info.fps) || info.fps > 1000)
    throw MediaError("the video's frame rate is unknown or invalid");
  // Duration from the headers first (a claim of hours is refused before reading any packet).
  double seconds = 0;
  if (st->duration > 0 && st->duration != AV_NOPTS_VALUE)
    seconds = static_cast<double>(st->duration) * av_q2d(st->time_base);
  else if (d.fmt()->duration > 0)
    seconds = static_cast<double>(d.fmt()->duration) / AV_TIME_BASE;
  auto too_long = [&](double s) {
    if (s > limits.max_seconds)
      throw MediaError("the video lasts " + std::to_string(s) + " s; the limit is " +
                       std::to_string(limits.max_seconds) + " s (--max-video-seconds)");
  };
  too_long(seconds);
  if (st->nb_frames > 0 && static_cast<uint64_t>(st->nb_frames) > limits.max_frames)
    throw MediaError("the video has " + std::to_string(st->nb_frames) + " frames; the limit is " +
                     std::to_string(limits.max_frames) + " (--max-video-frames)");
  // Count the packets (demuxing only, bounded by the frame limit).
  size_t packets = 0;
  while (d.next_packet()) {
    if (++packets > limits.max_frames)
      throw MediaError("the video has more than " + std::to_string(limits.max_frames) +
                       " frames (--max-video-frames)");
  }
  if (st->nb_frames > 0 && packets < static_cast<uint64_t>(st->nb_frames))
    throw MediaError("truncated video: " + std::to_string(packets) + " of " +
                     std::to_string(st->nb_frames) + " frames present");
  // A file cut between whole packets: fewer frames than its declared duration holds (half a
  // frame of slack for timestamp rounding).
  if (seconds > 0 && static_cast<double>(packets) < seconds * info.fps - 0.5)
    throw MediaError("truncated video: " + std::to_string(packets) + " frames where its " +
                     std::to_string(seconds) + " s at " + std::to_string(info.fps) +
                     " fps hold more");
  too_long(static_cast<double>(packets) / info.fps);
  if (packets < 2)
    throw MediaError("a video needs at least 2 frames, got " + std::to_string(packets));
  info.frames = static_cast<int>(packets);
  return info;
}

std::vector<Image> decode_video_frames(const EncodedVideo& video, const VideoLimits& limits,
                                       const std::vector<int>& indices) {
  std::vector<Image> out;
  if (indices.empty()) return out;
  Demuxer d(video, limits);
  const int width = d.stream()->codecpar->width, height = d.stream()->codecpar->height;
  AVCodecContext* dec = d.decoder();
  AVFrame* f = d.frame();
  int index = 0;  // of the next decoded frame
  size_t want = 0;
  auto drain = [&]() {
    for (;;) {
      const int err = avcodec_receive_frame(dec, f);
      if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) return;
      if (err < 0)
        throw MediaError("corrupt video: frame " + std::to_string(index) + " does not decode (" +
                         av_error(err) + ")");
      if (f->width != width || f->height != height)
        throw MediaError("frame " + std::to_string(index) + " is " + std::to_string(f->width) +
                         "x" + std::to_string(f->height) + " but the stream is " +
                         std::to_string(width) + "x" + std::to_string(height) +
                         ": a video's frames share one size");
      if (f->flags & AV_FRAME_FLAG_CORRUPT)
        throw MediaError("corrupt video: frame " + std::to_string(index) + " is damaged");
      if (want < indices.size() && index == indices[want]) {
        out.push_back(d.to_rgb(f));
        ++want;
      }
      av_frame_unref(f);
      ++index;
      if (want == indices.size()) return;
    }
  };
  while (want < indices.size() && d.next_packet()) {
    const int err = avcodec_send_packet(dec, d.packet());
    if (err < 0 && err != AVERROR(EAGAIN))
      throw MediaError("corrupt video: packet " + std::to_string(index) + " does not decode (" +
                       av_error(err) + ")");
    drain();
  }
  if (want < indices.size()) {
    avcodec_send_packet(dec, nullptr);  // flush the decoder's delayed frames
    drain();
  }
  if (want < indices.size())
    throw MediaError("corrupt video: frame " + std::to_string(indices[want]) +
                     " is missing (only " + std::to_string(index) + " frames decoded)");
  return out;
}

}  // namespace clef::media

// Writing test videos with Debian's FFmpeg (libavcodec + libavformat, in memory): RGB frames ->
// a lossless MP4 (libx264rgb, qp 0), Matroska (FFV1) or WebM (libvpx-vp9, lossless) file, and a
// frame -> PNG. Header-only, for the tests and the fuzz seed writer; nothing here is in the server.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "media/image.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
}

namespace clef::testsupport {

struct RgbFrames {
  int width = 0, height = 0;
  std::vector<std::vector<uint8_t>> rgb;  // HWC
};

// A deterministic pattern with sharp edges and gradients, different per frame.
inline RgbFrames pattern_frames(int n, int width, int height) {
  RgbFrames f{width, height, {}};
  for (int t = 0; t < n; ++t) {
    std::vector<uint8_t> px(static_cast<size_t>(width) * height * 3);
    for (int y = 0; y < height; ++y)
      for (int x = 0; x < width; ++x) {
        uint8_t* p = &px[(static_cast<size_t>(y) * width + x) * 3];
        p[0] = static_cast<uint8_t>((x * 255) / (width - 1) + 17 * t);
        p[1] = static_cast<uint8_t>(((x / 7 + y / 5 + t) % 2) ? 230 : 20);
        p[2] = static_cast<uint8_t>((y * 255) / (height - 1) ^ (t * 37));
      }
    f.rgb.push_back(std::move(px));
  }
  return f;
}

// Whether this FFmpeg build can write with `encoder` (e.g. "libx264rgb").
inline bool have_encoder(const char* encoder) {
  return avcodec_find_encoder_by_name(encoder) != nullptr;
}

namespace detail {

struct MemoryWriter {
  std::vector<uint8_t> bytes;
  size_t pos = 0;
};

inline int write_cb(void* opaque, uint8_t* buf, int n) {  // FFmpeg 5.1: non-const
  auto* w = static_cast<MemoryWriter*>(opaque);
  if (w->pos + static_cast<size_t>(n) > w->bytes.size()) w->bytes.resize(w->pos + n);
  std::memcpy(w->bytes.data() + w->pos, buf, static_cast<size_t>(n));
  w->pos += static_cast<size_t>(n);
  return n;
}

inline int64_t seek_cb(void* opaque, int64_t offset, int whence) {
  auto* w = static_cast<MemoryWriter*>(opaque);
  if (whence & AVSEEK_SIZE) return static_cast<int64_t>(w->bytes.size());
  int64_t base = 0;
  if ((whence & ~AVSEEK_FORCE) == SEEK_CUR) base = static_cast<int64_t>(w->pos);
  if ((whence & ~AVSEEK_FORCE) == SEEK_END) base = static_cast<int64_t>(w->bytes.size());
  if (base + offset < 0) return AVERROR(EINVAL);
  w->pos = static_cast<size_t>(base + offset);
  return static_cast<int64_t>(w->pos);
}

inline void check(int err, const char* what) {
  if (err < 0) {
    char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
    av_strerror(err, buf, sizeof buf);
    throw std::runtime_error(std::string(what) + ": " + buf);
  }
}

// Copies an RGB24 frame into `f` (rgb24, bgr0, or planar G, B, R for gbrp).
inline void fill(AVFrame* f, const std::vector<uint8_t>& rgb, int width, int height) {
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
      if (f->format == AV_PIX_FMT_RGB24) {
        std::memcpy(f->data[0] + y * f->linesize[0] + x * 3, p, 3);
      } else if (f->format == AV_PIX_FMT_BGR0) {
        uint8_t* q = f->data[0] + y * f->linesize[0] + x * 4;
        q[0] = p[2];
        q[1] = p[1];
        q[2] = p[0];
        q[3] = 0;
      } else {  // GBRP: plane 0 = G, 1 = B, 2 = R
        f->data[0][y * f->linesize[0] + x] = p[1];
        f->data[1][y * f->linesize[1] + x] = p[2];
        f->data[2][y * f->linesize[2] + x] = p[0];
      }
    }
}

}  // namespace detail

// `muxer`: "mp4", "matroska" or "webm"; `encoder`: "libx264rgb", "ffv1" or "libvpx-vp9" (all
// lossless here). Throws std::runtime_error when anything fails (a missing encoder included).
inline std::vector<uint8_t> encode_video(const RgbFrames& frames, int fps, const char* muxer,
                                         const char* encoder) {
  const AVCodec* codec = avcodec_find_encoder_by_name(encoder);
  if (!codec) throw std::runtime_error(std::string("no FFmpeg encoder ") + encoder);
  av_log_set_level(AV_LOG_ERROR);  // x264 and libvpx print their settings otherwise
  detail::MemoryWriter w;
  AVFormatContext* oc = nullptr;
  AVCodecContext* ctx = nullptr;
  AVFrame* frame = nullptr;
  AVPacket* pkt = nullptr;
  AVIOContext* io = nullptr;
  auto cleanup = [&] {
    av_packet_free(&pkt);
    av_frame_free(&frame);
    avcodec_free_context(&ctx);
    if (oc) avformat_free_context(oc);
    oc = nullptr;
    if (io) av_freep(&io->buffer);
    avio_context_free(&io);
  };
  try {
    detail::check(avformat_alloc_output_context2(&oc, nullptr, muxer, nullptr), "muxer");
    auto* buf = static_cast<unsigned char*>(av_malloc(65536));
    io = avio_alloc_context(buf, 65536, 1, &w, nullptr, detail::write_cb, detail::seek_cb);
    oc->pb = io;
    oc->flags |= AVFMT_FLAG_CUSTOM_IO;
    ctx = avcodec_alloc_context3(codec);
    ctx->width = frames.width;
    ctx->height = frames.height;
    ctx->time_base = {1, fps};
    ctx->framerate = {fps, 1};
    ctx->gop_size = 3;
    ctx->thread_count = 1;
    const std::string name = encoder;
    ctx->pix_fmt = name == "libx264rgb" ? AV_PIX_FMT_RGB24
                   : name == "ffv1"     ? AV_PIX_FMT_BGR0
                                        : AV_PIX_FMT_GBRP;
    if (name == "libx264rgb") {
      av_opt_set(ctx->priv_data, "qp", "0", 0);
      av_opt_set(ctx->priv_data, "preset", "ultrafast", 0);
    } else if (name == "libvpx-vp9") {
      av_opt_set(ctx->priv_data, "lossless", "1", 0);
      av_opt_set(ctx->priv_data, "deadline", "realtime", 0);
      av_opt_set(ctx->priv_data, "cpu-used", "8", 0);
    }
    if (oc->oformat->flags & AVFMT_GLOBALHEADER) ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    detail::check(avcodec_open2(ctx, codec, nullptr), "encoder");
    AVStream* st = avformat_new_stream(oc, nullptr);
    detail::check(avcodec_parameters_from_context(st->codecpar, ctx), "parameters");
    st->time_base = ctx->time_base;
    st->avg_frame_rate = {fps, 1};
    detail::check(avformat_write_header(oc, nullptr), "header");
    frame = av_frame_alloc();
    pkt = av_packet_alloc();
    frame->format = ctx->pix_fmt;
    frame->width = ctx->width;
    frame->height = ctx->height;
    detail::check(av_frame_get_buffer(frame, 0), "frame");
    auto drain = [&] {
      for (;;) {
        const int err = avcodec_receive_packet(ctx, pkt);
        if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) return;
        detail::check(err, "encode");
        av_packet_rescale_ts(pkt, ctx->time_base, st->time_base);
        pkt->stream_index = st->index;
        detail::check(av_interleaved_write_frame(oc, pkt), "write");
      }
    };
    for (size_t t = 0; t < frames.rgb.size(); ++t) {
      detail::check(av_frame_make_writable(frame), "writable");
      detail::fill(frame, frames.rgb[t], frames.width, frames.height);
      frame->pts = static_cast<int64_t>(t);
      detail::check(avcodec_send_frame(ctx, frame), "send");
      drain();
    }
    detail::check(avcodec_send_frame(ctx, nullptr), "flush");
    drain();
    detail::check(av_write_trailer(oc), "trailer");
    avio_flush(io);
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  return w.bytes;
}

// One RGB frame as a PNG file (FFmpeg's PNG encoder), for the frames form of the same video.
inline std::vector<uint8_t> encode_png(const std::vector<uint8_t>& rgb, int width, int height) {
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
  if (!codec) throw std::runtime_error("no FFmpeg PNG encoder");
  AVCodecContext* ctx = avcodec_alloc_context3(codec);
  AVFrame* frame = av_frame_alloc();
  AVPacket* pkt = av_packet_alloc();
  std::vector<uint8_t> out;
  ctx->width = width;
  ctx->height = height;
  ctx->pix_fmt = AV_PIX_FMT_RGB24;
  ctx->time_base = {1, 1};
  int err = avcodec_open2(ctx, codec, nullptr);
  if (err >= 0) {
    frame->format = AV_PIX_FMT_RGB24;
    frame->width = width;
    frame->height = height;
    err = av_frame_get_buffer(frame, 0);
  }
  if (err >= 0) {
    detail::fill(frame, rgb, width, height);
    err = avcodec_send_frame(ctx, frame);
  }
  if (err >= 0) err = avcodec_receive_packet(ctx, pkt);
  if (err >= 0) out.assign(pkt->data, pkt->data + pkt->size);
  av_packet_free(&pkt);
  av_frame_free(&frame);
  avcodec_free_context(&ctx);
  detail::check(err, "png");
  return out;
}

// A client's base64 (the media layer's encoder; tests/media/decode_test.cpp checks it against
// RFC 4648's vectors).
inline std::string base64(const std::vector<uint8_t>& b) {
  return media::base64_encode(b);
}

}  // namespace clef::testsupport

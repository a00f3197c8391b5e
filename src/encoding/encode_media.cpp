#include "encoding/encode_media.h"

#include <algorithm>
#include <cstdio>

#include "encoding/render.h"
#include "media/parallel.h"

namespace clef::encoding {
namespace {

[[noreturn]] void refuse(std::vector<std::string> loc, const std::string& msg,
                         const char* type = "value_error") {
  throw RequestError(FieldError{std::move(loc), escape_surrogates(msg), type});
}

void pads(MediaBlock& b, int32_t id, uint8_t type, const media::Grid& g) {
  b.runs.push_back({b.ids.size(), g.h / 2, g.w / 2});
  b.ids.insert(b.ids.end(), static_cast<size_t>(g.tokens()), id);
  b.types.insert(b.types.end(), static_cast<size_t>(g.tokens()), type);
}

void text(MediaBlock& b, const std::vector<int32_t>& ids) {
  b.ids.insert(b.ids.end(), ids.begin(), ids.end());
  b.types.insert(b.types.end(), ids.size(), 0);
}

void token(MediaBlock& b, int32_t id) {
  text(b, {id});
}

media::Sampling sampling(const MediaKwargs& kw) {
  media::Sampling s;
  if (kw.fps_null) s.target_fps.reset();
  if (kw.fps) s.target_fps = *kw.fps;
  s.num_frames = kw.num_frames;
  return s;
}

}  // namespace

MediaBlock plan_media(const ValidatedRequest& req, const EncodeOptions& opts,
                      const TokenizePiece& tokenize) {
  MediaBlock b;
  if (!req.has_media()) return b;
  const media::VisionTokens& tok = opts.media.tokens;
  if (!tok.valid())
    refuse({"body", req.images.empty() ? "videos" : "images"},
           "this model takes no images or videos (its config.json has no vision token ids)",
           "not_supported");
  media::PixelBudget image_budget = opts.media.image;
  if (req.media_kwargs.min_pixels)
    image_budget = {*req.media_kwargs.min_pixels, *req.media_kwargs.max_pixels};
  for (size_t k = 0; k < req.images.size(); ++k) {
    try {
      b.images.push_back(media::plan_image(req.images[k], image_budget, opts.max_image_pixels));
    } catch (const media::MediaError& e) {
      refuse({"body", "images", std::to_string(k)}, "image " + std::to_string(k) + ": " + e.what());
    }
    token(b, tok.vision_start);
    pads(b, tok.image_pad, 1, b.images.back().grid);
    token(b, tok.vision_end);
  }
  const media::Sampling s = sampling(req.media_kwargs);
  for (size_t k = 0; k < req.videos.size(); ++k) {
    const std::vector<std::string> loc{"body", "videos", std::to_string(k)};
    try {
      if (req.videos[k].data)
        b.videos.push_back(media::plan_video_file(
            *req.videos[k].data, s, opts.media.video,
            {opts.max_image_pixels, opts.max_video_frames, opts.max_video_seconds}));
      else
        b.videos.push_back(media::plan_video(req.videos[k].frames, req.videos[k].fps, s,
                                             opts.media.video, opts.max_image_pixels));
    } catch (const media::MediaError& e) {
      refuse(loc, "video " + std::to_string(k) + ": " + e.what());
    }
    const media::VideoPlan& v = b.videos.back();
    // One pad run per temporal group, each after its timestamp text.
    const media::Grid group{1, v.grid.h, v.grid.w};
    token(b, tok.vision_start);
    for (int32_t t = 0; t < v.grid.t; ++t) {
      char stamp[64];
      std::snprintf(stamp, sizeof stamp, "<%.1f seconds>", v.timestamps[static_cast<size_t>(t)]);
      text(b, tokenize(stamp, loc));
      token(b, tok.vision_start);
      pads(b, tok.video_pad, 2, group);
      token(b, tok.vision_end);
    }
    token(b, tok.vision_end);
  }
  text(b, tokenize("\n", {"body"}));
  return b;
}

void render_media(const MediaBlock& block, const EncodeOptions& opts, media::VisualInput& out) {
  // Images are independent: rendered in parallel, each resized straight into its own frame of the
  // request's one frame buffer (no per-image copy), the first refused image (by index) being the
  // one named.
  size_t image_bytes = 0;
  std::vector<size_t> at(block.images.size());
  for (size_t k = 0; k < block.images.size(); ++k) {
    at[k] = out.frames.size() + image_bytes;
    image_bytes += static_cast<size_t>(media::frame_bytes(block.images[k].grid));
  }
  size_t video_bytes = 0;
  for (const auto& v : block.videos)
    video_bytes += static_cast<size_t>(media::frame_bytes(v.grid)) * media::kVideoFramesPerGroup *
                   static_cast<size_t>(v.grid.t);
  out.frames.reserve(out.frames.size() + image_bytes + video_bytes);  // no regrowth
  out.frames.resize(out.frames.size() + image_bytes);
  std::vector<std::string> errors(block.images.size());
  // Each image's decode may use its share of the threads (one large JPEG: bands on several).
  const unsigned decode_threads = media::threads_per_item(block.images.size());
  media::parallel_items(block.images.size(), [&](size_t k) {
    try {
      media::render_image_into(block.images[k], opts.max_image_pixels, out.frames.data() + at[k],
                               decode_threads);
    } catch (const media::MediaError& e) {
      errors[k] = e.what();
    }
  });
  for (size_t k = 0; k < block.images.size(); ++k) {
    if (!errors[k].empty())
      refuse({"body", "images", std::to_string(k)},
             "image " + std::to_string(k) + ": " + errors[k]);
    out.image_grids.push_back(block.images[k].grid);
  }
  for (size_t k = 0; k < block.videos.size(); ++k) {
    try {
      media::render_video(block.videos[k], opts.max_image_pixels, out.frames);
    } catch (const media::MediaError& e) {
      refuse({"body", "videos", std::to_string(k)}, "video " + std::to_string(k) + ": " + e.what());
    }
    out.video_grids.push_back(block.videos[k].grid);
  }
}

std::vector<int32_t> rope_positions(size_t total, size_t offset, const MediaBlock& block) {
  std::vector<int32_t> pos(3 * total);
  int32_t p = 0;
  size_t next_run = 0;
  for (size_t i = 0; i < total;) {
    if (next_run < block.runs.size() && i == offset + block.runs[next_run].start) {
      // A visual token at merged row r, column c -> (p, p + r, p + c).
      const PadRun& r = block.runs[next_run++];
      for (int y = 0; y < r.rows; ++y)
        for (int x = 0; x < r.cols; ++x, ++i) {
          pos[i] = p;
          pos[total + i] = p + y;
          pos[2 * total + i] = p + x;
        }
      p += std::max(r.rows, r.cols);
      continue;
    }
    pos[i] = pos[total + i] = pos[2 * total + i] = p++;
    ++i;
  }
  return pos;
}

}  // namespace clef::encoding

// Shared by the media fixture tests (tests/media, tests/engine): a fixture request's media_kwargs
// (the reference processor's min_pixels / max_pixels for images, fps / num_frames for videos) as
// the media layer's budget and sampling; the defaults where the request names none.
#pragma once

#include "json/value.h"
#include "media/geometry.h"

namespace clef::testing {

inline media::PixelBudget image_budget(const json::Value& request) {
  media::PixelBudget b = media::kImageBudget;
  if (const json::Value* kw = request.find("media_kwargs"))
    if (const json::Value* mn = kw->find("min_pixels")) {
      b.min_pixels = *mn->as_int64();
      b.max_pixels = *kw->find("max_pixels")->as_int64();
    }
  return b;
}

// "fps": null clears Sampling's default target rate; absent, the default stays.
inline media::Sampling sampling(const json::Value& request) {
  media::Sampling s;
  if (const json::Value* kw = request.find("media_kwargs")) {
    if (const json::Value* f = kw->find("fps")) {
      if (f->is_null())
        s.target_fps.reset();
      else
        s.target_fps = f->as_double();
    }
    if (const json::Value* n = kw->find("num_frames"))
      s.num_frames = static_cast<int>(*n->as_int64());
  }
  return s;
}

}  // namespace clef::testing

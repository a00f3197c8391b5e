#include "service/decider.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "answer/answer.h"
#include "media/media_config.h"

namespace clef::service {

Decider::Decider(std::shared_ptr<const model::Release> release, DeciderOptions opts)
    : release_(std::move(release)), opts_(std::move(opts)) {
  if (!release_) throw std::invalid_argument("Decider needs a release");
  if (!release_->tokenizer) throw std::invalid_argument("Decider: the release has no tokenizer");
  // The release's vision token ids and pixel budgets; the decoded-size limit is the request limit.
  if (!opts_.encode.media.tokens.valid())
    opts_.encode.media = media::load_media_config(release_->dir);
  opts_.encode.max_image_pixels = opts_.limits.max_image_pixels;
  opts_.encode.max_video_frames = opts_.limits.max_video_frames;
  opts_.encode.max_video_seconds = opts_.limits.max_video_seconds;
}

void media_engines(DeciderOptions& opts,
                   const std::vector<std::shared_ptr<engine::Engine>>& engines) {
  opts.media_supported = !engines.empty();
  for (const auto& e : engines) opts.media_supported = opts.media_supported && e->supports_media();
  if (!engines.empty()) opts.engine_backend = engines.front()->info().backend;
}

Prepared Decider::prepare(const json::Value& body) const {
  Prepared p;
  p.request = encoding::validate_request(body, opts_.limits);
  const auto& names = opts_.served_model_names;
  if (!names.empty() && std::find(names.begin(), names.end(), p.request.model) == names.end()) {
    throw encoding::RequestError(
        {{"body", "model"}, "The model '" + p.request.model + "' is not served here", "not_found"},
        404);
  }
  // Refused before any image is decoded, and never silently dropped.
  if (p.request.has_media() && !opts_.media_supported) {
    const bool images = !p.request.images.empty();
    throw encoding::RequestError({{"body", images ? "images" : "videos"},
                                  std::string(images ? "images" : "videos") +
                                      " are not served by this engine yet (" +
                                      opts_.engine_backend + "): send a text-only request",
                                  "not_supported"});
  }
  p.encoded = encoding::encode_request(p.request, *release_->tokenizer, opts_.encode);
  return p;
}

json::Value Decider::finish(const Prepared& p, const engine::ForwardOutput& out, bool raw) const {
  if (out.logits.size() != p.encoded.questions.size())
    throw std::runtime_error("engine returned logits for " + std::to_string(out.logits.size()) +
                             " questions, expected " + std::to_string(p.encoded.questions.size()));
  json::Value response = answer::make_response(p.request, p.encoded, out.logits, raw);
  if (p.encoded.truncated_state_tokens > 0) {
    for (auto& [key, value] : response.members()) {
      if (key == "usage" && value.is_object())
        value.set("truncated_state_tokens", json::Value::integer(p.encoded.truncated_state_tokens));
    }
  }
  return response;
}

json::Value Decider::decide(const json::Value& body, engine::Engine& engine, bool raw) const {
  const Prepared p = prepare(body);
  const std::vector<engine::ForwardOutput> outs = engine.forward({&p.encoded});
  if (outs.size() != 1) throw std::runtime_error("engine returned no output for the request");
  return finish(p, outs[0], raw);
}

}  // namespace clef::service

// The request pipeline shared by `clefserve decide` and the HTTP server:
// request JSON -> validated request -> token ids + spans -> engine logits -> answer JSON.
// The Decider holds no engine: the caller runs the forward pass on its own (the server on any of
// its engines, through the queue).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "encoding/encode.h"
#include "encoding/request.h"
#include "engine/engine.h"
#include "json/value.h"
#include "model/release.h"

namespace clef::service {

struct DeciderOptions {
  encoding::Limits limits;
  // max_length, default truncation policy; `media` is read from the release when left without
  // vision tokens, and max_image_pixels is taken from `limits`.
  encoding::EncodeOptions encode;
  // Non-empty: only requests whose `model` is one of these are accepted (else RequestError 404).
  std::vector<std::string> served_model_names;
  // What the engines behind this Decider run (the Decider holds none): media requests are refused
  // before any decoding unless every engine supports them (Engine::supports_media); the backend
  // names the refusal. media_engines() fills both from the engines.
  bool media_supported = false;
  std::string engine_backend = "engine";
};

// DeciderOptions::media_supported and engine_backend from the engines that will run the forwards.
void media_engines(DeciderOptions& opts,
                   const std::vector<std::shared_ptr<engine::Engine>>& engines);

struct Prepared {
  encoding::ValidatedRequest request;
  encoding::EncodedRequest encoded;
};

class Decider {
 public:
  Decider(std::shared_ptr<const model::Release> release, DeciderOptions opts);

  // Validate, check the model name against served_model_names, encode. Throws
  // encoding::RequestError (422 invalid, 400 not an object, 404 model not served).
  Prepared prepare(const json::Value& body) const;
  // Logits -> response JSON (adds usage.truncated_state_tokens when the state was cut).
  json::Value finish(const Prepared& p, const engine::ForwardOutput& out, bool raw = false) const;
  // prepare + one forward on `engine` + finish.
  json::Value decide(const json::Value& body, engine::Engine& engine, bool raw = false) const;

  const model::Release& release() const { return *release_; }
  const DeciderOptions& options() const { return opts_; }

 private:
  std::shared_ptr<const model::Release> release_;
  DeciderOptions opts_;
};

}  // namespace clef::service

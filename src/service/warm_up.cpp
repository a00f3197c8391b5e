#include "service/warm_up.h"

#include <stdexcept>

#include "json/value.h"

namespace clef::service {

void warm_up(const Decider& decider, engine::Engine& engine) {
  static constexpr const char* kRequest =
      R"({"model":"warm-up","state":"The service is starting.",)"
      R"("questions":{"ready":{"type":"choice","instructions":"Is it ready?",)"
      R"("criteria":{"yes":"ready","no":"not ready"}},"urgency":{"type":"score",)"
      R"("criteria":["low","high"]},"ok":{"type":"noul"}}})";
  json::ParseError err;
  auto body = json::parse(kRequest, &err);
  if (!body) throw std::runtime_error("warm-up request does not parse: " + err.message);
  // A decider that accepts only some model names gets the first of them.
  const auto& names = decider.options().served_model_names;
  if (!names.empty()) body->set("model", json::Value::string(names.front()));
  // decide() formats the answer, which refuses a NaN/inf probability by throwing.
  (void)decider.decide(*body, engine);
}

}  // namespace clef::service

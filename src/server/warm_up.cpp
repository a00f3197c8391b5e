#include "server/warm_up.h"

#include <stdexcept>

#include "json/value.h"

namespace clef::server {

void warm_up(service::Decider& decider) {
  static constexpr const char* kRequest =
      R"({"model":"warm-up","state":"The service is starting.",)"
      R"("questions":{"ready":{"type":"choice","instructions":"Is it ready?",)"
      R"("criteria":{"yes":"ready","no":"not ready"}},"urgency":{"type":"score",)"
      R"("criteria":["low","high"]},"ok":{"type":"noul"}}})";
  json::ParseError err;
  auto body = json::parse(kRequest, &err);
  if (!body) throw std::runtime_error("warm-up request does not parse: " + err.message);
  // decide() formats the answer, which refuses a NaN/inf probability by throwing.
  (void)decider.decide(*body);
}

}  // namespace clef::server

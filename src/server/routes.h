// The GET routes: /health (readiness), /health/live (liveness), /v1/models, /metrics,
// /openapi.json, the playground (/ and /ui/*), answered on the event loop; they only read shared
// state. /v1/systemone is in systemone.h.
#pragma once

#include <string_view>

#include "server/core.h"
#include "server/http_util.h"

namespace clef::server::detail {

// target: the request target (the playground's assets are told apart by it).
Reply handle_get(const Core& core, Route route, std::string_view target);
Reply health(const Core& core);
Reply live(const Core& core);
Reply models(const Core& core);
Reply metrics_text(const Core& core);

}  // namespace clef::server::detail

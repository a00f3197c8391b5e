// The start-up warm-up: one real forward pass through the whole pipeline before the port opens, so
// /health only ever answers for a server that has already computed an answer.
#pragma once

#include "service/decider.h"

namespace clef::service {

// Runs one small fixed request through `decider` on `engine`. Throws (std::exception) on any
// failure, including a non-finite probability.
void warm_up(const Decider& decider, engine::Engine& engine);

}  // namespace clef::service

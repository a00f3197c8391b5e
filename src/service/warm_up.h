// The start-up warm-up: one real forward pass through the whole pipeline before the port opens, so
// /health only ever answers for a server that has already computed an answer.
#pragma once

#include "service/decider.h"

namespace clef::service {

// Runs one small fixed request through `decider`. Throws (std::exception) on any failure, including
// a non-finite probability.
void warm_up(Decider& decider);

}  // namespace clef::service

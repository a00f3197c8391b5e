// Synthetic System One requests of a given token length, for `clefserve profile`.
#pragma once

#include <string>

#include "json/value.h"
#include "service/decider.h"

namespace clef::cli {

// A one-question request whose state is `words` filler words (varied, mostly one token each).
json::Value make_request(const std::string& model, int words);
// A request of exactly `tokens` input tokens under d's options (the state cut to fit by
// truncation "allow").
json::Value request_of_length(const service::Decider& d, const std::string& model, int tokens);

}  // namespace clef::cli

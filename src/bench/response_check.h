// The System One response schema check that is part of the bench's clock (docs/spec/benchmark.md):
// the body parses as JSON, echoes the model, answers exactly the request's questions in order with
// the right types and option keys, and every probability is finite, in [0, 1], summing to 1 within
// 2e-3 per question.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "bench/manifest.h"

namespace clef::bench {

inline constexpr double kProbabilitySumTolerance = 2e-3;

struct CheckedResponse {
  long long input_tokens = -1;
  nlohmann::ordered_json answers;  // the response's "answers" object
};

// Empty string when the body is valid (and `out` filled), else the first reason it is not.
std::string check_response(const Item& item, const std::string& body, CheckedResponse* out);

}  // namespace clef::bench

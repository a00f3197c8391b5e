// Option logits -> System One answer JSON (docs/spec/encoding.md §6): float32 softmax per question,
// Python round(x, 4), choice ties to the earliest key in request order, score = sum i*p_i in
// double.
#pragma once

#include <vector>

#include "encoding/encode.h"
#include "json/value.h"

namespace clef::answer {

// logits[k] = question k's option logits in MODEL order (request question order over k).
// raw=true adds "raw": {qid: {"option_ids", "logits", "probabilities"}} unrounded.
// Throws std::runtime_error when a probability is NaN/inf (the server maps that to 500).
json::Value make_response(const encoding::ValidatedRequest& req,
                          const encoding::EncodedRequest& enc,
                          const std::vector<std::vector<float>>& logits, bool raw = false);

std::vector<float> softmax_f32(const std::vector<float>& logits);

}  // namespace clef::answer

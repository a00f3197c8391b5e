// The joint schema head (docs/spec/model.md §4) in float32 on the CPU: final hidden states + spans
// -> one logit per option. Exposed on its own so the GPU head can be checked against it.
#pragma once

#include <vector>

#include "encoding/encode.h"
#include "model/release.h"

namespace clef::engine::cpu {

// hidden: [T, D] row-major, the backbone's final-norm output ("last_hidden_state") for
// enc.input_ids. Returns logits[k] = question k's option logits in MODEL order (questions in
// request order). Throws std::runtime_error on an empty span or a span/id outside the
// sequence/vocabulary.
std::vector<std::vector<float>> run_joint_head(const model::Release& release, const float* hidden,
                                               int T, const encoding::EncodedRequest& enc);

}  // namespace clef::engine::cpu

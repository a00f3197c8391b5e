// The Qwen3.5 text backbone (docs/spec/model.md §3) in float32 on the CPU: token ids ->
// last_hidden_state. Weights stay bf16 in the mapped files; each GEMM converts its weight block by
// block (linear.h).
#pragma once

#include <cstdint>
#include <vector>

#include "model/release.h"

namespace clef::engine::cpu {

// Returns last_hidden_state [T, H] (after the final norm), row-major.
// When `hidden_states` is given it receives the fixture layout (tests/golden/README.md): L + 1
// tensors of [T, H]: [0] = embeddings, [k] = output of decoder layer k (k = 1..L-1), [L] =
// last_hidden_state. `threads` bounds the std::thread fan-out of the GDN / attention cores (0 =
// hardware concurrency). Throws std::runtime_error for an empty input or an id outside the
// vocabulary.
std::vector<float> run_backbone(const model::Release& release, const std::vector<int32_t>& ids,
                                int threads = 0,
                                std::vector<std::vector<float>>* hidden_states = nullptr);

}  // namespace clef::engine::cpu

// The Qwen3.5 vision tower (docs/spec/media.md §7) in float32 on the CPU: patch rows -> merged rows
// in the backbone's width, one per image / video pad token.
#pragma once

#include <cstdint>
#include <vector>

#include "media/visual_input.h"
#include "model/release.h"

namespace clef::engine::cpu {

// Checks `visual` against the release's tower (media::check_visual_input: grids positive with even
// h and w, frames exactly the grids' frame bytes). Throws std::runtime_error naming what is
// wrong (also when the release has no tower).
void check_visual_input(const model::Release& release, const media::VisualInput& visual);

// The tower on every image, then every video: returns [Σ tokens, out_hidden_size] row-major, the
// merged rows in the order their pad tokens take them.
std::vector<float> run_vision_tower(const model::Release& release, const media::VisualInput& visual,
                                    int threads = 0);

// The interpolated learned position embedding of one grid's patches (block-major order, one
// temporal slice), [h * w, width] (exposed for tests).
std::vector<float> vision_position_embedding(const model::Release& release, int h, int w);

}  // namespace clef::engine::cpu

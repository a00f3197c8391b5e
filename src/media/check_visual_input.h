// The checks a vision tower makes on a VisualInput before it runs (docs/spec/media.md §4, §7): one
// implementation for both engines, which add only what is theirs (no tower, device limits).
#pragma once

#include <cstdint>

#include "media/visual_input.h"

namespace clef::media {

// Checks `visual` against a tower whose patches hold `tower_patch_values` values (the vision
// config's channels x temporal x patch^2): grids positive with even h and w, the tower's patches
// the processor's, frames exactly frames_bytes (patchify.h): one (16 h) x (16 w) RGB frame per
// image, two per video temporal group. Throws std::runtime_error naming what is wrong; returns
// Σ patches.
int64_t check_visual_input(const VisualInput& visual, int tower_patch_values);

}  // namespace clef::media

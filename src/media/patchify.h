// Normalise and patchify resized frames into the vision tower's patch rows (docs/spec/media.md §4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "media/visual_input.h"

namespace clef::media {

// frames: RGB uint8 HWC images already resized to h x w (multiples of 32); an even count (the
// caller repeats an image, or a video's last frame when odd). Normalises (float(x) - 127.5f) /
// 127.5f and appends (frames/2)*(h/16)*(w/16) rows of kPatchValues to `out` in the processor's
// 2x2-merge-block order (spec §4). Returns the grid {frames/2, h/16, w/16}. Throws
// std::invalid_argument on an odd or empty frame count or a size that is not a positive multiple
// of 32.
Grid patchify(const std::vector<const uint8_t*>& frames, int h, int w, std::vector<float>& out);
// The same rows written at `rows`, which holds exactly patch_grid(...).patches() * kPatchValues
// floats (a slice of a buffer sized once for the whole request: no copy of the rows).
Grid patchify_into(const std::vector<const uint8_t*>& frames, int h, int w, float* rows);
// The grid patchify makes of `frames` frames at h x w; throws std::invalid_argument as it does.
Grid patch_grid(size_t frames, int h, int w);

// sha256 (lowercase hex) of the float32 little-endian bytes of `values`: how the fixtures name
// pixel values.
std::string sha256_f32le(const float* values, size_t count);
inline std::string sha256_f32le(const std::vector<float>& values) {
  return sha256_f32le(values.data(), values.size());
}

}  // namespace clef::media

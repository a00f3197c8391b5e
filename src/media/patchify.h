// Normalise and patchify resized frames into the vision tower's patch rows (docs/spec/media.md §4):
// the host's way from a VisualInput's uint8 frames to the float32 rows the reference's processor
// returns (the CPU engine, `clefserve encode`, the fixture tests; the CUDA tower does the same on
// the device, engine/cuda/kernels/patchify.h).
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

// The bytes visual.frames must hold for its grids: frame_bytes per image, 2 t x frame_bytes per
// video.
int64_t frames_bytes(const VisualInput& visual);
// Every grid's patch rows from visual.frames ([Σ patches, kPatchValues] float32: every image's
// rows, then every video's; the reference's pixel_values then pixel_values_videos), written at
// `rows` (exactly Σ patches x kPatchValues floats). Throws std::invalid_argument when the frames'
// bytes are not frames_bytes(visual) or a grid is empty or has an odd side.
void pixel_rows_into(const VisualInput& visual, float* rows);
std::vector<float> pixel_rows(const VisualInput& visual);

// sha256 (lowercase hex) of the float32 little-endian bytes of `values`: how the fixtures name
// pixel values.
std::string sha256_f32le(const float* values, size_t count);
inline std::string sha256_f32le(const std::vector<float>& values) {
  return sha256_f32le(values.data(), values.size());
}

}  // namespace clef::media

// What the encoding layer hands an engine for a request with images or videos (docs/spec/media.md
// §4, §6, §7): the patch rows of every image and video, their grids, and the vision tower's
// attention segments. Text-only requests carry an empty VisualInput.
#pragma once

#include <cstdint>
#include <vector>

namespace clef::media {

// A grid in 16-pixel patches (the processor's grid_thw): t temporal slices of 2 frames, h x w.
struct Grid {
  int32_t t = 0, h = 0, w = 0;
  int64_t patches() const { return static_cast<int64_t>(t) * h * w; }
  // Merged tokens (2x2 merge): what the backbone sees per grid.
  int64_t tokens() const { return patches() / 4; }
};

// Values per patch row: channel x temporal x y x x = 3 x 2 x 16 x 16.
inline constexpr int kPatchValues = 1536;

struct VisualInput {
  // [rows, kPatchValues] row-major float32: every image's rows (request order), then every
  // video's, each in the processor's 2x2-merge-block order.
  std::vector<float> pixel_values;
  std::vector<Grid> image_grids;  // one per image
  std::vector<Grid> video_grids;  // one per video (t = temporal groups)
  bool empty() const { return image_grids.empty() && video_grids.empty(); }
};

}  // namespace clef::media

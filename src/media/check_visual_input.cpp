#include "media/check_visual_input.h"

#include <stdexcept>
#include <string>

#include "media/patchify.h"

namespace clef::media {

int64_t check_visual_input(const VisualInput& visual, int tower_patch_values) {
  int64_t patches = 0;
  auto check = [&](const Grid& g, const char* kind, size_t k) {
    if (g.t < 1 || g.h < 2 || g.w < 2 || g.h % 2 != 0 || g.w % 2 != 0) {
      throw std::runtime_error(std::string(kind) + " " + std::to_string(k) + ": grid (" +
                               std::to_string(g.t) + ", " + std::to_string(g.h) + ", " +
                               std::to_string(g.w) +
                               ") is not t >= 1 slices of an even h x w of patches");
    }
    patches += g.patches();
  };
  for (size_t k = 0; k < visual.image_grids.size(); ++k) check(visual.image_grids[k], "image", k);
  for (size_t k = 0; k < visual.video_grids.size(); ++k) check(visual.video_grids[k], "video", k);
  if (tower_patch_values != kPatchValues) {
    throw std::runtime_error("vision tower: patches of " + std::to_string(tower_patch_values) +
                             " values, the processor makes " + std::to_string(kPatchValues));
  }
  const int64_t want = frames_bytes(visual);
  if (static_cast<int64_t>(visual.frames.size()) != want) {
    throw std::runtime_error("visual input: " + std::to_string(visual.frames.size()) +
                             " frame bytes for grids of " + std::to_string(patches) + " patches (" +
                             std::to_string(want) +
                             " expected: one RGB frame per image, two per video group)");
  }
  return patches;
}

}  // namespace clef::media

// What the encoding layer hands an engine for a request with images or videos (docs/spec/media.md
// §4, §6, §7): the resized uint8 frames of every image and video and their grids, from which the
// engines make the vision tower's patch rows where they consume them (media::pixel_rows on the
// host, a patchify kernel on the GPU: 1/8 of the float32 rows' bytes cross the host and the bus).
// Text-only requests carry an empty VisualInput.
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

// The block-major patch order patchify writes (docs/spec/media.md §4): row i of a temporal slice
// of w patches per row is merge block i / 4 (row-major over the (h/2) x (w/2) blocks), cell
// (i / 2 % 2, i % 2) inside it; r, c = the patch's row and column in the grid.
inline void patch_coords(int64_t i, int w, int32_t& r, int32_t& c) {
  const int64_t block = i / 4, blocks_w = w / 2;
  r = static_cast<int32_t>(block / blocks_w * 2 + i / 2 % 2);
  c = static_cast<int32_t>(block % blocks_w * 2 + i % 2);
}

// Frames of one temporal group: an image's one frame stands for both temporal slices (the
// processor repeats it), a video's group is 2 frames.
inline constexpr int kImageFramesPerGroup = 1, kVideoFramesPerGroup = 2;

// Bytes of one RGB uint8 frame of grid g: (16 h) x (16 w) pixels x 3 channels.
inline int64_t frame_bytes(const Grid& g) {
  return static_cast<int64_t>(g.h) * 16 * g.w * 16 * 3;
}

struct VisualInput {
  // RGB uint8 HWC frames resized to their grid's size, back to back: every image's one frame
  // (request order), then every video's 2 t frames in temporal order (an odd sampled count already
  // repeats its last frame, spec §5).
  std::vector<uint8_t> frames;
  std::vector<Grid> image_grids;  // one per image
  std::vector<Grid> video_grids;  // one per video (t = temporal groups)
  bool empty() const { return image_grids.empty() && video_grids.empty(); }
};

}  // namespace clef::media

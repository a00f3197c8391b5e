// torch's uint8 antialiased bicubic resize (the Pillow-SIMD fixed-point scheme the reference runs
// on the CPU), bit for bit (docs/spec/media.md §4).
#pragma once

#include <cstdint>
#include <vector>

namespace clef::media {

// RGB uint8 HWC `src` (in_h x in_w) -> out_h x out_w. Horizontal pass first (into a uint8
// intermediate), then vertical; a pass whose length is unchanged is skipped.
std::vector<uint8_t> resize_bicubic_aa(const uint8_t* src, int in_h, int in_w, int out_h,
                                       int out_w);
// The same pixels written at `out` (out_h x out_w x 3 bytes; a frame of the request's buffer).
void resize_bicubic_aa_into(const uint8_t* src, int in_h, int in_w, int out_h, int out_w,
                            uint8_t* out);

}  // namespace clef::media

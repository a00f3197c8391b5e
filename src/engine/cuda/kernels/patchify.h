// The vision tower's input rows made on the device from a request's uint8 frames (docs/spec/
// media.md §4): the host uploads the resized RGB frames (an image's one frame is 1/8 of the bytes
// of its float32 rows, which the host no longer writes) and this writes the patch rows straight in
// the tower's storage type. The values are media::patchify_into's bit for bit:
// (float(x) - 127.5f) / 127.5f in IEEE round-to-nearest fp32 (exact subtraction, correctly rounded
// division), then one round-to-nearest-even cast to bf16 in the bf16 engine (what the reference's
// pixel_values.to(bfloat16) does). Row order (t, by, bx, dy, dx), values (channel, temporal, y, x).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernel_path.h"
#include "media/visual_input.h"

namespace clef::engine::cuda {

// rows [Σ patches, kPatchValues] (every image's rows, then every video's) from `frames`, the
// device copy of visual.frames (media::check_visual_input'ed: its bytes are the grids'). E is
// __nv_bfloat16 or float. vec8: a thread per (row, temporal slice, patch line, half line) reads 8
// pixels (24 bytes, three 8-byte loads) and writes 8 values of each channel (16-byte stores);
// taken under KernelPath::Auto when frames is 8-byte and rows 16-byte aligned. generic: a thread
// per value, one byte load and one store.
template <typename E>
void patchify_rows(const media::VisualInput& visual, const uint8_t* frames, E* rows,
                   KernelPath path, cudaStream_t s);
const char* patchify_rows_variant(KernelPath path);

}  // namespace clef::engine::cuda

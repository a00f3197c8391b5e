// The Qwen3.5 text backbone (docs/spec/model.md §3) in float32 on the CPU: token ids ->
// last_hidden_state. Weights stay bf16 in the mapped files; each GEMM converts its weight block by
// block (linear.h).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cpu/fp8_emulation.h"
#include "model/release.h"

namespace clef::engine::cpu {

// What a request with images or videos adds (docs/spec/media.md §6-7); pointers stay owned by the
// caller.
struct MediaInputs {
  const float* visual_rows = nullptr;     // [image_rows + video_rows, H]: the tower's merged rows
  int64_t image_rows = 0;                 // taken by the image pads (type 1) in order
  int64_t video_rows = 0;                 // then by the video pads (type 2) in order
  const uint8_t* token_types = nullptr;   // [T]: 0 text, 1 image pad, 2 video pad
  const int32_t* position_ids = nullptr;  // [3][T]: temporal, height, width rotary positions
};

// Returns last_hidden_state [T, H] (after the final norm), row-major.
// When `hidden_states` is given it receives the fixture layout (tests/golden/README.md): L + 1
// tensors of [T, H]: [0] = embeddings, [k] = output of decoder layer k (k = 1..L-1), [L] =
// last_hidden_state. `threads` bounds the std::thread fan-out of the GDN / attention cores (0 =
// hardware concurrency). Throws std::runtime_error for an empty input or an id outside the
// vocabulary, and for media whose pad count differs from its rows. `media` null = a text request
// (positions 0..T-1, the path the text fixtures check bit for bit). `inputs`: what the big
// projections multiply (Fp8Emulated: as the FP8 CUDA engine quantises them, fp8_emulation.h).
std::vector<float> run_backbone(const model::Release& release, const std::vector<int32_t>& ids,
                                int threads = 0,
                                std::vector<std::vector<float>>* hidden_states = nullptr,
                                const MediaInputs* media = nullptr,
                                GemmInputs inputs = GemmInputs::Float32);

}  // namespace clef::engine::cpu

// The gated full-attention mixer (docs/spec/model.md §3): q/k RMSNorm1p per head, partial
// rotate-half RoPE, causal GQA softmax attention, sigmoid output gate.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cpu/fp8_emulation.h"
#include "model/release.h"

namespace clef::engine::cpu {

// cos/sin tables [T, rd/2] for positions 0..T-1, computed in float32 like transformers' default
// RoPE (inv_freq = 1 / theta^(2i/rd), angle = float(pos) * inv_freq).
void rope_tables(int T, int rd, double theta, std::vector<float>& cos_t, std::vector<float>& sin_t);

// Rotate-half RoPE on the first rd dims of each of `heads` vectors of head_dim at position t.
void apply_rope(float* x, int heads, int head_dim, int rd, const float* cos_row,
                const float* sin_row);

// Causal softmax attention. q: [T, nh, hd] (row stride ldq), k/v: [T, nkv, hd] (row stride ldkv);
// query head j uses kv head j / (nh / nkv). out: [T, nh, hd] (row stride ldo).
void causal_attention(const float* q, int ldq, const float* k, const float* v, int ldkv, int T,
                      int nh, int nkv, int hd, float* out, int ldo, int threads);

// cos/sin tables [T, rd/2] for 3-D positions ([3][T]: temporal, height, width) with the
// interleaved multimodal split (docs/spec/media.md §6, HF's apply_interleaved_mrope): frequency i
// takes the height position when i % 3 == 1 and i < 3·section[1], the width position when
// i % 3 == 2 and i < 3·section[2], else the temporal one. (p, p, p) gives rope_tables' values.
void mrope_tables(int T, int rd, double theta, const std::vector<int>& section,
                  const int32_t* position_ids, std::vector<float>& cos_t,
                  std::vector<float>& sin_t);

// Layer `layer`'s mixer on u = RMSNorm1p(h) [T, H]; returns [T, H] (before the residual add).
// position_ids: [3][T] multimodal positions, or null for 0..T-1. inputs: what its projections
// multiply (fp8_emulation.h).
std::vector<float> gated_attention_mixer(const model::Release& release, int layer, const float* u,
                                         int T, int threads, const int32_t* position_ids = nullptr,
                                         GemmInputs inputs = GemmInputs::Float32);

}  // namespace clef::engine::cpu

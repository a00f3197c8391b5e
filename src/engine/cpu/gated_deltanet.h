// The Gated DeltaNet mixer of the linear-attention layers (docs/spec/model.md §3), with the exact
// sequential recurrence and an fp32 state.
#pragma once

#include <vector>

#include "engine/cpu/fp8_emulation.h"
#include "model/release.h"

namespace clef::engine::cpu {

// Exact gated delta rule over T tokens. q, k: [T, Hk, dk] (q already l2-normalised and scaled by
// 1/sqrt(dk), k l2-normalised); v: [T, Hv, dv]; g (log decay, <= 0), beta: [T, Hv]. Value head h
// reads key head h / (Hv / Hk). Writes o: [T, Hv, dv]. Heads run in parallel on up to `threads`
// threads.
void gated_delta_rule(const float* q, const float* k, const float* v, const float* g,
                      const float* beta, int T, int Hk, int Hv, int dk, int dv, float* o,
                      int threads);

// Layer `layer`'s mixer on u = RMSNorm1p(h) [T, H]; returns [T, H] (before the residual add).
// inputs: what its FP8-capable projections multiply (fp8_emulation.h; in_proj_b / in_proj_a stay
// float32, as the FP8 CUDA engine keeps them bf16).
std::vector<float> gated_deltanet_mixer(const model::Release& release, int layer, const float* u,
                                        int T, int threads,
                                        GemmInputs inputs = GemmInputs::Float32);

}  // namespace clef::engine::cpu

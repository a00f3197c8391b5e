// CPU reference of the causal GQA attention core (engine/cuda/attention/attention_core.h): double
// accumulation, exact softmax. Test-only (clef_engine_ref).
#pragma once

#include <vector>

namespace clef::engine::ref {

// q [T, nh, hd], k/v [T, nkv, hd] (query head h reads kv head h / (nh / nkv)). out [T, nh, hd] is
// resized and zeroed, then filled for query rows `rows` (all rows when empty; each row at most
// once), others left zero.
void attention_ref(const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, int T, int nh, int nkv, int hd,
                   const std::vector<int>& rows, std::vector<double>& out);

}  // namespace clef::engine::ref

// CPU references of the GQA attention core (engine/cuda/attention/attention_core.h): double
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

// Attention separate per segment, as the vision tower runs it (non-causal; causal applies the
// backbone's rule within each segment): segments of lengths[i] rows laid back to back from row 0,
// no GQA, scores scaled by `scale`. q/k/v [sum(lengths), nh, hd]; out is resized to that and
// zeroed, then filled for query rows `rows` (all rows when empty; each row at most once).
void segment_attention_ref(const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, const std::vector<int>& lengths, int nh,
                           int hd, double scale, bool causal, const std::vector<int>& rows,
                           std::vector<double>& out);

}  // namespace clef::engine::ref

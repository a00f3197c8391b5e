// CPU reference of the joint head's batch attention (engine/cuda/head_attention.h): double
// accumulation, exact softmax. Test-only (clef_engine_ref).
#pragma once

#include <vector>

namespace clef::engine::ref {

// Request r's queries (rows [sum(nq[<r]), + nq[r]) of q [*, heads * hd]) over its keys (rows
// [k0[r], + nk[r]) of kv [*, 2 * heads * hd]: K in the first heads * hd columns, V after), scores
// scaled by 1 / sqrt(hd). Returns [sum(nq), heads * hd].
std::vector<double> head_attention_ref(const std::vector<float>& q, const std::vector<float>& kv,
                                       const std::vector<int>& nq, const std::vector<int>& k0,
                                       const std::vector<int>& nk, int heads, int hd);

}  // namespace clef::engine::ref

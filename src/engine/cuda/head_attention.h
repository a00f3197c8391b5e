// The joint head's attention for a whole batch in one launch set (docs/spec/model.md §4): few
// queries (a request's options or questions) against the keys of their own request only (its
// memory rows, or its questions), fp32, exact softmax. Requests lie back to back in the query
// and key matrices; a plan (host) cuts each request's queries into tiles of kHeadAttnTile and its
// keys into splits, and one kernel computes every (tile, split, head) partial softmax, a second
// merges a query's splits in a fixed order. A request's plan depends on its own query and key
// counts only, so its outputs are the same bits alone or in any batch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace clef::engine::cuda {

inline constexpr int kHeadAttnTile = 16;           // queries a CTA
inline constexpr int kHeadAttnKeysPerSplit = 128;  // keys a split at least covers ...
inline constexpr int kHeadAttnSplitsPerTile = 16;  // ... and a request's tiles x splits at most
inline constexpr int kHeadAttnMaxHeadDim = 128;

// Host image of one attention's tables for a batch.
struct HeadAttnPlan {
  // [items][5] {first query, queries (<= kHeadAttnTile), first key, end key, first part}: one CTA
  // row per item (x heads).
  std::vector<int32_t> items;
  // [queries][3] {first part, part stride, splits}: query q's split j partial is part
  // first + j * stride.
  std::vector<int32_t> combine;
  int parts = 0;  // partial-result slots (per head)
  int item_count() const { return static_cast<int>(items.size() / 5); }
  int query_count() const { return static_cast<int>(combine.size() / 3); }
};

// Request r's queries are [sum(queries[<r]), + queries[r]) and its keys [key_begin[r], +
// keys[r]) (keys[r] >= 1 where queries[r] >= 1). Splits: ceil(keys / kHeadAttnKeysPerSplit),
// at most max(1, kHeadAttnSplitsPerTile / tiles), cut in multiples of 32 keys.
HeadAttnPlan plan_head_attention(const std::vector<int>& queries, const std::vector<int>& key_begin,
                                 const std::vector<int>& keys);
// The parts any plan of `queries` queries in `requests` requests needs at most (a request's
// queries x splits <= max(queries, 16 x kHeadAttnSplitsPerTile)).
inline size_t head_attention_parts_bound(size_t queries, size_t requests) {
  return queries + requests * static_cast<size_t>(kHeadAttnTile * kHeadAttnSplitsPerTile);
}

// Device views of a plan's tables (inside the head's uploaded batch table).
struct HeadAttnTables {
  const int32_t* items = nullptr;
  const int32_t* combine = nullptr;
  int item_count = 0, query_count = 0, parts = 0;
};

// out[i, h*hd + d] = sum_k softmax_k(scale * q_i,h . k_k,h) v_k,h[d] over query i's keys (rows of
// k / v with leading dimension ldkv; head h at columns h*hd). q [queries, ldq], out [queries,
// ldo]. part_ml [2 * parts * heads] and part_acc [parts * heads * hd]: scratch. hd <=
// kHeadAttnMaxHeadDim.
void head_attention(const float* q, int ldq, const float* k, const float* v, int ldkv, int heads,
                    int hd, float scale, const HeadAttnTables& t, float* part_ml, float* part_acc,
                    float* out, int ldo, cudaStream_t s);

}  // namespace clef::engine::cuda

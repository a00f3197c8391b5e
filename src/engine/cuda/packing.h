// Several requests in one forward: their token rows packed back to back ([T_total, ...], no
// padding between them; the last sequence absorbs the bucket's padding rows, which right padding
// keeps exact). Every op either works per row (GEMMs, norms, gates) or is told where each sequence
// starts: positions restart at 0 (RoPE, conv taps), GDN chunks never straddle two sequences and
// each sequence's state starts at zero, attention is causal within a sequence. The tables live in
// fixed device buffers (workspace.h), so one captured graph per (token bucket, sequence bucket)
// serves every packing that fits it.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/gdn/gdn.h"

namespace clef::engine::cuda {

// Sequences one forward packs at most, and the sequence buckets graphs are captured for (1, 2, 4,
// ... kMaxPackedSequences): a grid sized for the bucket, unused slots exit at once.
inline constexpr int kMaxPackedSequences = 64;
int sequence_bucket(int sequences);
// prepare() captures a (bucket, sequence bucket) graph when S/2 + 1 sequences of this many rows
// fit the bucket (a System One request is longer than this: its prompt alone is); rarer packings
// get their graph when first seen.
inline constexpr int kMinPackedRows = 16;

// Attention tile slots any packing of `sequences` sequences into `rows` rows needs at most.
constexpr int attention_tile_slots(int rows, int sequences, int rows_per_tile) {
  return (rows + rows_per_tile - 1) / rows_per_tile + (sequences > 1 ? sequences - 1 : 0);
}

// Host images of the device tables for one packing (docs: gdn/gdn.h GdnSequences, attention/
// attention_core.h AttnSequences).
struct PackTables {
  int rows = 0, seq_slots = 0, chunk_slots = 0, tile_slots = 0;
  std::vector<int32_t> begin;        // [sequences + 1] first row of each sequence; back() = rows
  std::vector<int32_t> positions;    // [rows] position of each row within its sequence
  std::vector<int32_t> chunk_row0;   // [chunk_slots]
  std::vector<int32_t> chunk_valid;  // [chunk_slots] (0: unused)
  std::vector<int32_t> seq_chunk0;   // [seq_slots + 1]
  std::vector<int32_t> tiles;        // [tile_slots][4] {q0, begin, end, block0}; q0 -1: unused
  // Per-sequence key tiles (attention/kv_tiles.h): block0 = kv_seq_block0(begin, s) in `tiles`,
  // and row r of sequence s at tiled row block0 * 64 + (r - begin) ([rows]).
  std::vector<int32_t> kv_rows;
};

// lengths: each sequence's real rows (>= 1), in order; rows >= their sum (the last sequence takes
// the rest); seq_slots >= lengths.size(). Attention tiles of rows_per_tile query rows, heaviest
// (most keys) first so the longest CTAs start first.
PackTables pack_tables(const std::vector<int>& lengths, int rows, int seq_slots, int rows_per_tile);
// The int32 values of any such packing's tables (positions, chunk_row0, chunk_valid, seq_chunk0,
// tiles, kv_rows): what their staging needs.
size_t pack_table_ints(int rows, int seq_slots, int rows_per_tile);

// The vision tower's attention table (AttnSequences with causal = false): non-causal segments (one
// per image, one per video temporal group) laid back to back from row 0, lengths[i] (>= 1) rows
// each. Tiles of rows_per_tile query rows (attention_rows_per_tile for the kernel that will run,
// with the call's T, heads and padded head_dim), {q0, begin, end, 0}, longest segment first (ties
// in row order); slots beyond the tiles get q0 = -1. The table has attention_tile_slots(sum,
// lengths.size(), rows_per_tile) slots (its size / 4: AttnSequences::tile_slots), the most any
// packing of that many rows and segments needs, so a grid sized for a bucket fits every packing.
std::vector<int32_t> segment_tiles(const std::vector<int>& lengths, int rows_per_tile);

// What the backbone's kernels read for a packed forward (device pointers into the workspace);
// none: one sequence.
struct PackView {
  const int32_t* positions = nullptr;
  const int32_t* kv_rows = nullptr;  // PackTables::kv_rows, read where attn.kv_head_blocks > 0
  GdnSequences gdn;
  AttnSequences attn;
};

}  // namespace clef::engine::cuda

#include "engine/cuda/packing.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/cuda/attention/kv_tiles.h"

namespace clef::engine::cuda {

int sequence_bucket(int sequences) {
  if (sequences < 1 || sequences > kMaxPackedSequences)
    throw std::invalid_argument("sequence_bucket: " + std::to_string(sequences) +
                                " sequences (1.." + std::to_string(kMaxPackedSequences) + ")");
  int b = 1;
  while (b < sequences) b *= 2;
  return b;
}

PackTables pack_tables(const std::vector<int>& lengths, int rows, int seq_slots,
                       int rows_per_tile) {
  const int S = static_cast<int>(lengths.size());
  if (S < 1 || seq_slots < S || rows_per_tile < 1)
    throw std::invalid_argument("pack_tables: bad sequence count or tile size");
  PackTables t;
  t.rows = rows;
  t.seq_slots = seq_slots;
  t.begin.assign(1, 0);
  for (int len : lengths) {
    if (len < 1) throw std::invalid_argument("pack_tables: empty sequence");
    t.begin.push_back(t.begin.back() + len);
  }
  if (rows < t.begin.back()) throw std::invalid_argument("pack_tables: rows < total length");
  t.begin.back() = rows;  // the padding rows belong to the last sequence

  t.positions.resize(rows);
  t.kv_rows.resize(rows);
  for (int s = 0; s < S; ++s) {
    std::iota(t.positions.begin() + t.begin[s], t.positions.begin() + t.begin[s + 1], 0);
    std::iota(t.kv_rows.begin() + t.begin[s], t.kv_rows.begin() + t.begin[s + 1],
              kv_seq_block0(t.begin[s], s) * kKvTileRows);
  }

  t.chunk_slots = gdn_chunk_slots(rows, seq_slots);
  t.seq_chunk0.assign(seq_slots + 1, 0);
  for (int s = 0; s < S; ++s) {
    t.seq_chunk0[s] = static_cast<int32_t>(t.chunk_row0.size());
    for (int r = t.begin[s]; r < t.begin[s + 1]; r += kGdnChunk) {
      t.chunk_row0.push_back(r);
      t.chunk_valid.push_back(std::min(kGdnChunk, t.begin[s + 1] - r));
    }
  }
  const int used = static_cast<int>(t.chunk_row0.size());
  for (int s = S; s <= seq_slots; ++s) t.seq_chunk0[s] = used;
  t.chunk_row0.resize(t.chunk_slots, 0);
  t.chunk_valid.resize(t.chunk_slots, 0);

  struct Tile {
    int q0, b, e, work, block0;
  };
  std::vector<Tile> tiles;
  for (int s = 0; s < S; ++s)
    for (int q0 = t.begin[s]; q0 < t.begin[s + 1]; q0 += rows_per_tile)
      tiles.push_back({q0, t.begin[s], t.begin[s + 1],
                       std::min(q0 + rows_per_tile, t.begin[s + 1]) - t.begin[s],
                       kv_seq_block0(t.begin[s], s)});
  // Heaviest first; ties in row order, so the table (and the answers) never depend on sort
  // internals.
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const Tile& x, const Tile& y) { return x.work > y.work; });
  t.tile_slots = attention_tile_slots(rows, seq_slots, rows_per_tile);
  if (static_cast<int>(tiles.size()) > t.tile_slots || used > t.chunk_slots)
    throw std::logic_error("pack_tables: slot bound violated");
  t.tiles.assign(static_cast<size_t>(t.tile_slots) * 4, 0);
  for (int i = 0; i < t.tile_slots; ++i) {
    int32_t* d = t.tiles.data() + 4 * i;
    if (i < static_cast<int>(tiles.size())) {
      d[0] = tiles[i].q0, d[1] = tiles[i].b, d[2] = tiles[i].e, d[3] = tiles[i].block0;
    } else {
      d[0] = -1;
    }
  }
  return t;
}

size_t pack_table_ints(int rows, int seq_slots, int rows_per_tile) {
  return 2 * static_cast<size_t>(rows) + 2 * static_cast<size_t>(gdn_chunk_slots(rows, seq_slots)) +
         static_cast<size_t>(seq_slots) + 1 +
         4 * static_cast<size_t>(attention_tile_slots(rows, seq_slots, rows_per_tile));
}

std::vector<int32_t> segment_tiles(const std::vector<int>& lengths, int rows_per_tile) {
  if (lengths.empty() || rows_per_tile < 1)
    throw std::invalid_argument("segment_tiles: no segments or bad tile size");
  int64_t total = 0;
  for (int len : lengths) {
    if (len < 1) throw std::invalid_argument("segment_tiles: empty segment");
    total += len;
    // (rows + rows_per_tile) must fit too: attention_tile_slots rounds up in int.
    if (total + rows_per_tile > std::numeric_limits<int32_t>::max())
      throw std::invalid_argument("segment_tiles: rows overflow int32");
  }
  const int S = static_cast<int>(lengths.size());
  struct Tile {
    int q0, b, e;
  };
  std::vector<Tile> tiles;
  int b = 0;
  for (int len : lengths) {
    for (int q0 = b; q0 < b + len; q0 += rows_per_tile) tiles.push_back({q0, b, b + len});
    b += len;
  }
  // Every tile of a segment reads all its keys: the longest segments' tiles are the heaviest.
  // Stable, so the table (and the answers) never depend on sort internals.
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const Tile& x, const Tile& y) { return x.e - x.b > y.e - y.b; });
  const int slots = attention_tile_slots(static_cast<int>(total), S, rows_per_tile);
  if (static_cast<int>(tiles.size()) > slots)
    throw std::logic_error("segment_tiles: slot bound violated");
  std::vector<int32_t> out(static_cast<size_t>(slots) * 4, 0);
  for (int i = 0; i < slots; ++i) {
    int32_t* d = out.data() + 4 * i;
    if (i < static_cast<int>(tiles.size())) {
      d[0] = tiles[i].q0, d[1] = tiles[i].b, d[2] = tiles[i].e;
    } else {
      d[0] = -1;
    }
  }
  return out;
}

}  // namespace clef::engine::cuda

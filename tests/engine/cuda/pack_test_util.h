// Packed batches for the GPU tests (engine/cuda/packing.h): the packings the varlen kernels are
// checked on, the device copy of a packing's tables, and the delta rule's reference run on each
// sequence alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/gdn_test_inputs.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/packing.h"
#include "support/ref/backbone_ref.h"

namespace clef::gputest {

// Packings: fixed edge cases, then random ones (1..12 sequences, lengths 1..400, a long one
// sometimes), each with a few rows of bucket padding.
inline std::vector<std::vector<int>> packings(std::mt19937_64& rng) {
  std::vector<std::vector<int>> out = {
      {1, 63, 64, 65}, {65, 1}, {64, 64, 64}, {1, 1, 1, 1, 1}, {300, 7, 129, 1, 700}};
  std::uniform_int_distribution<int> count(1, 12), len(1, 400), coin(0, 3);
  for (int i = 0; i < 4; ++i) {
    std::vector<int> p(count(rng));
    for (int& l : p) l = coin(rng) == 0 ? len(rng) * 4 : len(rng);
    out.push_back(p);
  }
  return out;
}

// The device copy of a packing's tables (what the engine uploads into its workspace).
struct DeviceTables {
  engine::cuda::DeviceBuffer row0, valid, seq0, tiles;
  engine::cuda::GdnSequences gdn;
  engine::cuda::AttnSequences attn;
  explicit DeviceTables(const engine::cuda::PackTables& t) {
    auto up = [](engine::cuda::DeviceBuffer& b, const std::vector<int32_t>& v) {
      b = to_device_ints(v);
      return b.get<int32_t>();
    };
    gdn = {up(row0, t.chunk_row0), up(valid, t.chunk_valid), up(seq0, t.seq_chunk0), t.chunk_slots,
           t.seq_slots};
    attn = {up(tiles, t.tiles), t.tile_slots};
  }
};

// The exact recurrence (support/ref) over each sequence of the packing alone, from a zero state:
// o [T, Hv, dv] as the packed GDN must write it.
inline std::vector<float> gdn_reference_per_sequence(const GdnTestInputs& in,
                                                     const engine::cuda::PackTables& t, int T,
                                                     int Hk, int Hv, int dk, int dv) {
  std::vector<float> out(size_t(T) * Hv * dv);
  for (size_t s = 0; s + 1 < t.begin.size(); ++s) {
    const size_t b = size_t(t.begin[s]);
    const int n = t.begin[s + 1] - t.begin[s];
    engine::ref::gated_delta_rule_ref(
        in.q.data() + b * Hk * dk, in.k.data() + b * Hk * dk, in.v.data() + b * Hv * dv,
        in.g.data() + b * Hv, in.beta.data() + b * Hv, n, Hk, Hv, dk, dv, out.data() + b * Hv * dv);
  }
  return out;
}

// A packing of `lengths` as the GDN tests run it: 3 rows of bucket padding (absorbed by the last
// sequence), twice the sequence bucket's slots (the rest unused), the tables on the device, random
// inputs of the shape and the reference run on each sequence alone.
struct PackedGdnCase {
  int T, slots;
  engine::cuda::PackTables tables;
  DeviceTables dev;
  GdnTestInputs in;
  std::vector<float> expect;
  PackedGdnCase(std::mt19937_64& rng, const std::vector<int>& lengths, int Hk, int Hv, int dk,
                int dv)
      : T(std::accumulate(lengths.begin(), lengths.end(), 0) + 3),
        slots(engine::cuda::sequence_bucket(static_cast<int>(lengths.size())) * 2),
        tables(engine::cuda::pack_tables(lengths, T, slots, 64)),
        dev(tables),
        in(gdn_test_inputs(rng, T, Hk, Hv, dk, dv, -2.0f)),
        expect(gdn_reference_per_sequence(in, tables, T, Hk, Hv, dk, dv)) {}
};

}  // namespace clef::gputest

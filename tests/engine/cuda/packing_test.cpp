// Packed batches (engine/cuda/packing.h): the host tables (the backbone's and the vision tower's
// segment_tiles), and every varlen kernel against its CPU
// reference run on each sequence ALONE (support/ref: the sequential delta rule, the causal
// attention), on random packings with lengths around the chunk and tile sizes (1, 63, 64, 65, ...)
// and mixed long/short, extra unused sequence slots, and bucket padding absorbed by the last
// sequence. Outputs are NaN-poisoned first, so a row no kernel wrote fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/kv_tiles.h"
#include "engine/cuda/attention/tuning.h"
#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/gdn_test_inputs.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/pack_test_util.h"
#include "engine/cuda/packing.h"
#include "support/ref/attention_ref.h"
#include "support/ref/backbone_ref.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using namespace clef::gputest;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

TEST(PackTables, CoverEverySequenceWithoutStraddling) {
  auto rng = fresh_rng();
  for (const auto& lengths : packings(rng)) {
    SCOPED_TRACE("lengths " + comma_list(lengths));
    const int total = std::accumulate(lengths.begin(), lengths.end(), 0), rows = total + 5;
    const int S = static_cast<int>(lengths.size()), slots = sequence_bucket(S);
    for (int rpt : {32, 64, 128}) {
      const PackTables t = pack_tables(lengths, rows, slots, rpt);
      ASSERT_EQ(t.begin.size(), lengths.size() + 1);
      // The closed form prepare() sizes the staging with.
      EXPECT_EQ(pack_table_ints(rows, slots, rpt), t.positions.size() + t.chunk_row0.size() +
                                                       t.chunk_valid.size() + t.seq_chunk0.size() +
                                                       t.tiles.size() + t.kv_rows.size());
      EXPECT_EQ(t.begin.back(), rows);  // the last sequence takes the padding
      for (int s = 0; s < S; ++s) {
        const int b = t.begin[s], e = t.begin[s + 1];
        EXPECT_EQ(e - b, s + 1 < S ? lengths[s] : lengths[s] + 5);
        for (int r = b; r < e; ++r) ASSERT_EQ(t.positions[r], r - b);
        // chunks: consecutive slots tiling [b, e) in 64-row pieces
        int r = b;
        for (int c = t.seq_chunk0[s]; c < t.seq_chunk0[s + 1]; ++c) {
          EXPECT_EQ(t.chunk_row0[c], r);
          EXPECT_EQ(t.chunk_valid[c], std::min(kGdnChunk, e - r));
          r += kGdnChunk;
        }
        EXPECT_GE(r, e);
        EXPECT_LT(r - e, kGdnChunk);
      }
      EXPECT_EQ(t.chunk_slots, gdn_chunk_slots(rows, slots));
      for (int s = S; s < slots; ++s) EXPECT_EQ(t.seq_chunk0[s + 1] - t.seq_chunk0[s], 0);
      for (int c = t.seq_chunk0[S]; c < t.chunk_slots; ++c) EXPECT_EQ(t.chunk_valid[c], 0);
      // tiles: every row in exactly one tile, inside its own sequence, heaviest first
      std::vector<int> covered(rows, 0);
      int prev_work = 1 << 30;
      for (int i = 0; i < t.tile_slots; ++i) {
        const int32_t* d = &t.tiles[4 * i];
        if (d[0] < 0) continue;
        const int work = std::min(d[0] + rpt, d[2]) - d[1];
        EXPECT_LE(work, prev_work);
        prev_work = work;
        const auto it = std::find(t.begin.begin(), t.begin.end(), d[1]);
        ASSERT_NE(it, t.begin.end());
        EXPECT_EQ(d[2], *(it + 1));
        EXPECT_EQ((d[0] - d[1]) % rpt, 0);
        for (int r = d[0]; r < std::min(d[0] + rpt, d[2]); ++r) ++covered[r];
        const int s = static_cast<int>(it - t.begin.begin());
        EXPECT_EQ(d[3], d[1] / kKvTileRows + s) << "the sequence's first key block";
      }
      for (int r = 0; r < rows; ++r) ASSERT_EQ(covered[r], 1) << "row " << r;
      // Per-sequence key tiles: a sequence's rows in order from its first block's first row; no
      // two rows share a tiled row, and all fit the blocks a kv head holds.
      ASSERT_EQ(t.kv_rows.size(), size_t(rows));
      std::vector<int> used(size_t(kKvTileRows) * kv_head_blocks(rows, slots), 0);
      for (int s = 0; s < S; ++s)
        for (int r = t.begin[s]; r < t.begin[s + 1]; ++r) {
          ASSERT_EQ(t.kv_rows[r], (t.begin[s] / kKvTileRows + s) * kKvTileRows + (r - t.begin[s]));
          ASSERT_LT(size_t(t.kv_rows[r]), used.size());
          ASSERT_EQ(used[t.kv_rows[r]]++, 0) << "row " << r;
        }
    }
  }
  EXPECT_THROW(pack_tables({10, 0}, 20, 2, 64), std::invalid_argument);
  EXPECT_THROW(pack_tables({10, 10}, 19, 2, 64), std::invalid_argument);
  EXPECT_THROW(pack_tables({10, 10, 1}, 40, 2, 64), std::invalid_argument);
  EXPECT_EQ(sequence_bucket(1), 1);
  EXPECT_EQ(sequence_bucket(3), 4);
  EXPECT_EQ(sequence_bucket(kMaxPackedSequences), kMaxPackedSequences);
  EXPECT_THROW(sequence_bucket(kMaxPackedSequences + 1), std::invalid_argument);
}

// The vision tower's table (host only): the hand-derived tables of two small packings, then the
// invariants on random ones, and the refusals.
TEST(SegmentTiles, HandBuiltTables) {
  // Segments [0,3) [3,8) [8,10), tiles of 2 rows: the 5-row segment's tiles first, then the 3-row,
  // then the 2-row; ceil(10 / 2) + 2 = 7 slots, the last unused.
  EXPECT_EQ(segment_tiles({3, 5, 2}, 2),
            (std::vector<int32_t>{3, 3, 8, 0, 5, 3, 8, 0, 7,  3, 8,  0, 0, 0,
                                  3, 0, 2, 0, 3, 0, 8, 8, 10, 0, -1, 0, 0, 0}));
  // A tie in length keeps row order; ceil(8 / 4) + 2 = 4 slots.
  EXPECT_EQ(segment_tiles({2, 4, 2}, 4),
            (std::vector<int32_t>{2, 2, 6, 0, 0, 0, 2, 0, 6, 6, 8, 0, -1, 0, 0, 0}));
  EXPECT_EQ(segment_tiles({1}, 64), (std::vector<int32_t>{0, 0, 1, 0}));
}

TEST(SegmentTiles, CoverEverySegmentLongestFirst) {
  auto rng = fresh_rng();
  for (const auto& lengths : packings(rng)) {
    SCOPED_TRACE("lengths " + comma_list(lengths));
    const int total = std::accumulate(lengths.begin(), lengths.end(), 0);
    const int S = static_cast<int>(lengths.size());
    std::vector<int> begin(1, 0);  // the segments, back to back
    for (int l : lengths) begin.push_back(begin.back() + l);
    for (int rpt : {32, 64, 128}) {
      const std::vector<int32_t> t = segment_tiles(lengths, rpt);
      ASSERT_EQ(t.size(), size_t(4) * attention_tile_slots(total, S, rpt));
      std::vector<int> covered(total, 0);
      int prev_len = 1 << 30, prev_q0 = -1;
      bool unused_seen = false;
      for (size_t i = 0; i < t.size() / 4; ++i) {
        const int32_t* d = &t[4 * i];
        EXPECT_EQ(d[3], 0);
        if (d[0] < 0) {
          unused_seen = true;
          continue;
        }
        EXPECT_FALSE(unused_seen) << "a used slot after an unused one";
        const auto it = std::find(begin.begin(), begin.end() - 1, d[1]);
        ASSERT_NE(it, begin.end() - 1);
        EXPECT_EQ(d[2], *(it + 1));
        EXPECT_GE(d[0], d[1]);
        EXPECT_LT(d[0], d[2]);
        EXPECT_EQ((d[0] - d[1]) % rpt, 0);
        const int len = d[2] - d[1];
        EXPECT_LE(len, prev_len);
        if (len == prev_len) {
          EXPECT_GT(d[0], prev_q0);  // ties in row order
        }
        prev_len = len, prev_q0 = d[0];
        for (int r = d[0]; r < std::min(d[0] + rpt, d[2]); ++r) ++covered[r];
      }
      for (int r = 0; r < total; ++r) ASSERT_EQ(covered[r], 1) << "row " << r;
    }
  }
  EXPECT_THROW(segment_tiles({}, 64), std::invalid_argument);
  EXPECT_THROW(segment_tiles({10, 0}, 64), std::invalid_argument);
  EXPECT_THROW(segment_tiles({10}, 0), std::invalid_argument);
  EXPECT_THROW(segment_tiles({std::numeric_limits<int>::max()}, 64), std::invalid_argument);
  EXPECT_THROW(segment_tiles({1 << 30, 1 << 30}, 64), std::invalid_argument);
}

template <typename E>
class PackedKernels : public ::testing::Test {};
using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(PackedKernels, Types);

template <typename E>
constexpr bool kIsBf16 = std::is_same_v<E, bf16>;

// Each sequence of the packed GDN equals the exact recurrence over that sequence alone (zero
// initial state, no chunk reaching into a neighbour), on both paths (tensor cores where bf16 and
// supported; SIMT, each fed the input form it takes), with extra unused sequence slots.
TYPED_TEST(PackedKernels, GdnChunkedPerSequence) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Shape {
    int Hk, Hv, dk, dv;
  };
  for (Shape sh : {Shape{2, 4, 16, 16}, Shape{16, 32, 128, 128}}) {
    for (const auto& lengths : packings(rng)) {
      SCOPED_TRACE("lengths " + comma_list(lengths) + " dk " + std::to_string(sh.dk));
      const PackedGdnCase c(rng, lengths, sh.Hk, sh.Hv, sh.dk, sh.dv);
      const int T = c.T, slots = c.slots;
      const GdnTestInputs& in = c.in;
      for (KernelPath path : {KernelPath::Auto, KernelPath::Generic}) {
        SCOPED_TRACE(gdn_chunked_variant(sh.dk, sh.dv, kIsBf16<E>, path));
        DeviceBuffer ws(gdn_workspace_bytes(T, sh.Hv, sh.dk, sh.dv, slots));
        CLEF_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));
        const size_t no = size_t(T) * sh.Hv * sh.dv;
        auto o = poisoned<E>(no);
        gdn_chunked<E>(in.form_for(sh.dk, sh.dv, kIsBf16<E>, path), T, sh.Hk, sh.Hv, sh.dk, sh.dv,
                       o.template get<E>(), ws.get(), path, 0, nullptr, nullptr, &c.dev.gdn);
        CLEF_EXPECT_CLOSE(to_host<E>(o, no), c.expect, kIsBf16<E> ? 1e-2 : 2e-5);
      }
    }
  }
}

// Packed causal attention equals attention over each sequence alone: every kernel shape (bf16 4 and
// 8 warps, fp32), GQA, head dims 64 and 256.
TYPED_TEST(PackedKernels, AttentionPerSequence) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Shape {
    int nh, nkv, hd;
  };
  for (Shape sh : {Shape{4, 2, 64}, Shape{16, 4, 256}}) {
    for (const auto& lengths : packings(rng)) {
      SCOPED_TRACE("lengths " + comma_list(lengths) + " hd " + std::to_string(sh.hd));
      const int total = std::accumulate(lengths.begin(), lengths.end(), 0), T = total + 3;
      const int S = static_cast<int>(lengths.size()), slots = sequence_bucket(S) * 2;
      auto q = randn(rng, size_t(T) * sh.nh * sh.hd, 2.0f);
      auto k = randn(rng, size_t(T) * sh.nkv * sh.hd);
      auto v = randn(rng, size_t(T) * sh.nkv * sh.hd);
      if (kIsBf16<E>)
        for (auto* x : {&q, &k, &v}) round_all_bf16(*x);
      std::vector<float> expect(q.size());
      {
        const PackTables t = pack_tables(lengths, T, slots, 64);
        for (int s = 0; s < S; ++s) {
          const int b = t.begin[s], n = t.begin[s + 1] - b;
          const size_t qo = size_t(b) * sh.nh * sh.hd, ko = size_t(b) * sh.nkv * sh.hd;
          std::vector<float> qs(q.begin() + qo, q.begin() + qo + size_t(n) * sh.nh * sh.hd),
              ks(k.begin() + ko, k.begin() + ko + size_t(n) * sh.nkv * sh.hd),
              vs(v.begin() + ko, v.begin() + ko + size_t(n) * sh.nkv * sh.hd);
          std::vector<double> r;
          ref::attention_ref(qs, ks, vs, n, sh.nh, sh.nkv, sh.hd, {}, r);
          std::copy(r.begin(), r.end(), expect.begin() + qo);
        }
      }
      auto dq = to_device<E>(q), dk = to_device<E>(k), dv = to_device<E>(v);
      const int shapes = kIsBf16<E> ? 3 : 1;  // bf16: the public pick, 4 warps, 8 warps
      for (int w = 0; w < shapes; ++w) {
        const int warps = w == 0 ? 0 : 4 * w;
        const int rpt = !kIsBf16<E>  ? attention_rows_per_tile(false, T, sh.nh, sh.hd)
                        : warps == 0 ? attention_rows_per_tile(true, T, sh.nh, sh.hd)
                                     : 16 * warps;
        SCOPED_TRACE("rows per tile " + std::to_string(rpt) + " warps " + std::to_string(warps));
        const PackTables t = pack_tables(lengths, T, slots, rpt);
        DeviceTables dt(t);
        auto o = poisoned<E>(q.size());
        if constexpr (kIsBf16<E>) {
          if (warps == 0)
            attention_core_bf16(dq.template get<bf16>(), dk.template get<bf16>(),
                                dv.template get<bf16>(), o.template get<bf16>(), T, sh.nh, sh.nkv,
                                sh.hd, nullptr, &dt.attn);
          else
            attention_core_bf16_warps(warps, dq.template get<bf16>(), dk.template get<bf16>(),
                                      dv.template get<bf16>(), o.template get<bf16>(), T, sh.nh,
                                      sh.nkv, sh.hd, nullptr, &dt.attn);
        } else {
          attention_core_f32(dq.template get<float>(), dk.template get<float>(),
                             dv.template get<float>(), o.template get<float>(), T, sh.nh, sh.nkv,
                             sh.hd, nullptr, &dt.attn);
        }
        CLEF_EXPECT_CLOSE(to_host<E>(o, q.size()), expect, kIsBf16<E> ? 8e-3 : 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace clef

// The vision tower's attention (docs/spec/media.md §7) on attention_core_{bf16,f32}: non-causal,
// separate per segment, 16 heads of 72 columns, as the tower runs them (unpadded: 72 is
// attention_padded_head_dim(72)) and zero-padded to 80 (the kernels other head dims pad to), score
// scale 1/sqrt(72), tables from segment_tiles. Checked against segment_attention_ref at the true
// head dim 72 (double accumulation) on fresh random inputs, outputs NaN-poisoned first: every
// kernel shape (bf16 public pick, 4 and 8 warps; fp32), segment lengths around the tile sizes, one
// long segment and mixed ones. The causal mode with a caller's scale and the padded head dim is
// checked the same way (pack_tables' table, the causal rule within each segment).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/tuning.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/packing.h"
#include "support/ref/attention_ref.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using namespace clef::gputest;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

constexpr int kHeads = 16;  // the tower's attention: 16 heads x 72, no GQA
constexpr int kHd = 72;

// [rows, heads, hd] -> [rows, heads, hdp], zeros in columns hd..hdp-1 (what the tower writes).
std::vector<float> pad_heads(const std::vector<float>& x, int rows, int hdp) {
  std::vector<float> out(static_cast<size_t>(rows) * kHeads * hdp, 0.f);
  for (size_t r = 0; r < static_cast<size_t>(rows) * kHeads; ++r)
    std::copy(x.begin() + r * kHd, x.begin() + (r + 1) * kHd, out.begin() + r * hdp);
  return out;
}

// The rows compared with the reference: all of a short segment; of a long one its first 64 and
// last 128 rows (the first and last tiles of either tile size) and one random row in each further
// 16-row group (every warp of every tile), so a 4096-row segment costs seconds, not minutes.
std::vector<int> checked_rows(const std::vector<int>& lengths, std::mt19937_64& rng) {
  std::vector<int> rows;
  int b = 0;
  for (int len : lengths) {
    for (int r = 0; r < len; r += 16) {
      const int n = std::min(16, len - r);
      if (len <= 256 || r < 64 || r + n > len - 128) {
        for (int i = 0; i < n; ++i) rows.push_back(b + r + i);
      } else {
        rows.push_back(b + r + std::uniform_int_distribution<int>(0, n - 1)(rng));
      }
    }
    b += len;
  }
  return rows;
}

// The kernels under test: 0 = attention_core_bf16 (its own pick), 4 / 8 = that bf16 shape, -1 =
// attention_core_f32.
constexpr int kVariants[] = {0, 4, 8, -1};

int rows_per_tile(int variant, int T, int hdp) {
  if (variant < 0) return attention_rows_per_tile(false, T, kHeads, hdp);
  if (variant == 0) return attention_rows_per_tile(true, T, kHeads, hdp);
  return 16 * variant;
}

struct Inputs {
  std::vector<float> q, k, v;  // [T, heads, 72], bf16-exact (both kernels see the same values)
  engine::cuda::DeviceBuffer q16, k16, v16, q32, k32, v32;  // padded to hdp columns
};

Inputs make_inputs(std::mt19937_64& rng, int T, int hdp) {
  Inputs in;
  // q scaled up (0.5..3) so that some softmax rows are peaked (exercises the running max).
  const float qs = std::uniform_real_distribution<float>(0.5f, 3.f)(rng);
  in.q = randn(rng, static_cast<size_t>(T) * kHeads * kHd, qs);
  in.k = randn(rng, in.q.size());
  in.v = randn(rng, in.q.size());
  for (auto* x : {&in.q, &in.k, &in.v}) round_all_bf16(*x);
  const auto qp = pad_heads(in.q, T, hdp), kp = pad_heads(in.k, T, hdp),
             vp = pad_heads(in.v, T, hdp);
  in.q16 = to_device<bf16>(qp), in.k16 = to_device<bf16>(kp), in.v16 = to_device<bf16>(vp);
  in.q32 = to_device<float>(qp), in.k32 = to_device<float>(kp), in.v32 = to_device<float>(vp);
  return in;
}

void run_variant(int variant, const Inputs& in, engine::cuda::DeviceBuffer& out, int T, int hdp,
                 const AttnSequences* seqs) {
  if (variant < 0)
    attention_core_f32(in.q32.get<float>(), in.k32.get<float>(), in.v32.get<float>(),
                       out.get<float>(), T, kHeads, kHeads, hdp, nullptr, seqs);
  else if (variant == 0)
    attention_core_bf16(in.q16.get<bf16>(), in.k16.get<bf16>(), in.v16.get<bf16>(), out.get<bf16>(),
                        T, kHeads, kHeads, hdp, nullptr, seqs);
  else
    attention_core_bf16_warps(variant, in.q16.get<bf16>(), in.k16.get<bf16>(), in.v16.get<bf16>(),
                              out.get<bf16>(), T, kHeads, kHeads, hdp, nullptr, seqs);
}

// One packing, every kernel: the table built for the tile size of the kernel that runs (causal:
// pack_tables, as the backbone builds it; non-causal: segment_tiles), and for one non-causal
// segment also no table at all (tiles null: one sequence of T rows).
void check_segments(const std::vector<int>& lengths, bool causal, int hdp, std::mt19937_64& rng) {
  const int T = std::accumulate(lengths.begin(), lengths.end(), 0);
  const int S = static_cast<int>(lengths.size());
  const float scale = 1.f / std::sqrt(static_cast<float>(kHd));
  const Inputs in = make_inputs(rng, T, hdp);
  const std::vector<int> rows = checked_rows(lengths, rng);
  std::vector<double> want;
  ref::segment_attention_ref(in.q, in.k, in.v, lengths, kHeads, kHd, 1.0 / std::sqrt(double(kHd)),
                             causal, rows, want);
  for (int variant : kVariants) {
    const bool f32 = variant < 0;
    const int rpt = rows_per_tile(variant, T, hdp);
    for (bool table : {true, false}) {
      if (!table && (causal || S > 1)) continue;
      SCOPED_TRACE(testing::Message() << "variant " << variant << " rows per tile " << rpt
                                      << (table ? " table" : " no table"));
      std::vector<int32_t> host_tiles;
      if (table)
        host_tiles = causal ? pack_tables(lengths, T, S, rpt).tiles : segment_tiles(lengths, rpt);
      engine::cuda::DeviceBuffer dtiles(std::max<size_t>(host_tiles.size(), 1) * 4);
      if (table)
        CLEF_CUDA_CHECK(cudaMemcpy(dtiles.get(), host_tiles.data(), host_tiles.size() * 4,
                                   cudaMemcpyHostToDevice));
      AttnSequences seqs;
      seqs.tiles = table ? dtiles.get<int32_t>() : nullptr;
      seqs.tile_slots = static_cast<int>(host_tiles.size() / 4);
      seqs.causal = causal;
      seqs.scale = scale;
      const size_t n = static_cast<size_t>(T) * kHeads * hdp;
      auto out = f32 ? poisoned<float>(n) : poisoned<bf16>(n);
      run_variant(variant, in, out, T, hdp, &seqs);
      const std::vector<float> got = f32 ? to_host<float>(out, n) : to_host<bf16>(out, n);
      // Every row written and finite; the zero-padded columns give exact zeros.
      size_t non_finite = 0, pad_nonzero = 0;
      for (size_t r = 0; r < static_cast<size_t>(T) * kHeads; ++r)
        for (int c = 0; c < hdp; ++c) {
          const float x = got[r * hdp + c];
          non_finite += !std::isfinite(x);
          pad_nonzero += c >= kHd && x != 0.f;
        }
      EXPECT_EQ(non_finite, 0u);
      EXPECT_EQ(pad_nonzero, 0u);
      double num = 0, den = 0, max_abs = 0;
      for (int t : rows)
        for (int h = 0; h < kHeads; ++h)
          for (int c = 0; c < kHd; ++c) {
            const double w = want[(static_cast<size_t>(t) * kHeads + h) * kHd + c];
            const double d = got[(static_cast<size_t>(t) * kHeads + h) * hdp + c] - w;
            if (!std::isfinite(d)) continue;  // counted above
            num += d * d, den += w * w, max_abs = std::max(max_abs, std::abs(d));
          }
      const double rel_l2 = std::sqrt(num / std::max(den, 1e-300));
      // As attention_core_test: bf16 output rounding alone is ~2^-9 relative, and P is rounded to
      // bf16 for the PV product.
      EXPECT_LT(rel_l2, f32 ? 1e-5 : 8e-3) << "max abs " << max_abs;
      EXPECT_LT(max_abs, f32 ? 1e-4 : 5e-2) << "rel l2 " << rel_l2;
    }
  }
}

const std::vector<std::vector<int>> kSegments = {
    {1}, {63}, {64}, {65}, {63, 64, 65}, {1000}, {1024}, {4096}, {17, 1200, 3, 640}, {4096, 1024}};

// The tower's own head dim (72, no padding) and the padded 80.
const int kHeadDims[] = {kHd, 80};

TEST(SegmentAttention, NonCausalPaddedHeadsMatchReference) {
  CLEF_REQUIRE_GPU();
  ASSERT_EQ(attention_padded_head_dim(kHd), kHd) << "the tower's head dim runs unpadded";
  auto rng = fresh_rng();
  for (const auto& lengths : kSegments) {
    SCOPED_TRACE("lengths " + comma_list(lengths));
    for (int hdp : kHeadDims) {
      SCOPED_TRACE(testing::Message() << "head dim " << hdp);
      check_segments(lengths, false, hdp, rng);
    }
  }
}

TEST(SegmentAttention, CausalPaddedHeadsWithScaleMatchReference) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  for (const auto& lengths : std::vector<std::vector<int>>{{1}, {63, 64, 65}, {17, 1200, 3, 640}}) {
    SCOPED_TRACE("lengths " + comma_list(lengths));
    for (int hdp : kHeadDims) {
      SCOPED_TRACE(testing::Message() << "head dim " << hdp);
      check_segments(lengths, true, hdp, rng);
    }
  }
}

// Host only (no device needed).
TEST(SegmentAttention, PaddedHeadDim) {
  EXPECT_EQ(attention_padded_head_dim(72), 72);  // the vision tower's, unpadded
  EXPECT_EQ(attention_padded_head_dim(73), 80);
  EXPECT_EQ(attention_padded_head_dim(80), 80);
  EXPECT_EQ(attention_padded_head_dim(1), 32);
  EXPECT_EQ(attention_padded_head_dim(32), 32);
  EXPECT_EQ(attention_padded_head_dim(33), 64);
  EXPECT_EQ(attention_padded_head_dim(64), 64);
  EXPECT_EQ(attention_padded_head_dim(65), 72);
  EXPECT_EQ(attention_padded_head_dim(81), 96);
  EXPECT_EQ(attention_padded_head_dim(129), 160);
  EXPECT_EQ(attention_padded_head_dim(255), 256);
  EXPECT_EQ(attention_padded_head_dim(256), 256);
  EXPECT_THROW(attention_padded_head_dim(0), std::invalid_argument);
  EXPECT_THROW(attention_padded_head_dim(257), std::invalid_argument);
}

// Host only: the shape and table checks run before any launch.
TEST(SegmentAttention, RefusesBadArguments) {
  // A head dim without a kernel (a multiple of 8, but not instantiated: pad it to 64).
  EXPECT_THROW(attention_core_bf16(nullptr, nullptr, nullptr, nullptr, 8, 16, 16, 40, nullptr),
               std::invalid_argument);
  EXPECT_THROW(attention_core_f32(nullptr, nullptr, nullptr, nullptr, 8, 16, 16, 40, nullptr),
               std::invalid_argument);
  for (float bad :
       {-0.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    AttnSequences s;
    s.causal = false;
    s.scale = bad;
    EXPECT_THROW(
        attention_core_bf16(nullptr, nullptr, nullptr, nullptr, 8, 16, 16, 80, nullptr, &s),
        std::invalid_argument);
    EXPECT_THROW(attention_core_f32(nullptr, nullptr, nullptr, nullptr, 8, 16, 16, 80, nullptr, &s),
                 std::invalid_argument);
  }
  AttnSequences no_table;  // slots without a table
  no_table.tile_slots = 3;
  EXPECT_THROW(
      attention_core_bf16(nullptr, nullptr, nullptr, nullptr, 8, 16, 16, 80, nullptr, &no_table),
      std::invalid_argument);
  EXPECT_THROW(
      attention_core_f32(nullptr, nullptr, nullptr, nullptr, 8, 16, 16, 80, nullptr, &no_table),
      std::invalid_argument);
}

}  // namespace
}  // namespace clef

// Every bf16 attention kernel variant (engine/cuda/attention/tuning.h: warps, m-tiles, K/V stages,
// Q in registers, rescale skip) against the CPU reference (support/ref/attention_ref.h, double
// accumulation) on fresh random inputs, outputs NaN-poisoned before every launch: causal and
// non-causal, one sequence without a table and packed tables (pack_tables for causal, as the
// backbone builds them; segment_tiles for non-causal, as the tower does) with lengths around the
// tile sizes, mixed long and short sequences and unused slots; head dims 64, 72, 80, 128 and 256;
// GQA 1:1 and 4:1. The stage count, Q's place and the rescale skip (a multiplication by exactly 1
// left out) change where operands wait (shared memory, registers, which buffer), never the
// arithmetic or its order, so those variants must also equal the 1-stage kernel of their warps and
// m-tiles bit for bit. The key-tiled Hopper variants (wg64o4t, wg64o4te; wg64te, wg64ote at 256)
// read K and V made by tile_kv_bf16 (checked against kv_tiled_index below) and must equal the
// kernel they tile (wg64o4; wg64) bit for bit wherever every sequence starts on a 64-row block (the
// same key tiles); elsewhere its first tile also holds a neighbour's keys, masked. wg64ote (the
// softmax overlapped with P V) runs wg64te's operations on O in the same order: equal everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/kv_tiles.h"
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

struct Shape {
  int nh, nkv, hd;
};

// k/v [T, nkv, hd] -> [T, nh, hd], head h = kv head h / (nh / nkv): the GQA reading, so the
// no-GQA segment reference serves every head ratio.
std::vector<float> expand_heads(const std::vector<float>& x, int T, const Shape& s) {
  const int group = s.nh / s.nkv;
  std::vector<float> out(static_cast<size_t>(T) * s.nh * s.hd);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < s.nh; ++h)
      std::copy_n(x.begin() + (static_cast<size_t>(t) * s.nkv + h / group) * s.hd, s.hd,
                  out.begin() + (static_cast<size_t>(t) * s.nh + h) * s.hd);
  return out;
}

// One packing (or one sequence without a table: `table` false), one mode; every supported variant
// checked against the reference and against the 1-stage kernel of its warps and m-tiles.
void check_all_variants(const Shape& s, const std::vector<int>& lengths, bool causal, bool table,
                        std::mt19937_64& rng) {
  const int T = std::accumulate(lengths.begin(), lengths.end(), 0);
  const int S = static_cast<int>(lengths.size());
  // Default scale on the unpacked causal path (scale 0 = 1/sqrt(hd)); the tower's 1/sqrt(72)
  // (a caller's scale that is not the head dim's) elsewhere.
  const bool default_scale = causal && !table;
  const double scale = default_scale ? 1.0 / std::sqrt(double(s.hd)) : 1.0 / std::sqrt(72.0);
  // q scaled up (0.5..3) so that some softmax rows are peaked (exercises the running max).
  const float qs = std::uniform_real_distribution<float>(0.5f, 3.f)(rng);
  std::vector<float> q = randn(rng, static_cast<size_t>(T) * s.nh * s.hd, qs);
  std::vector<float> k = randn(rng, static_cast<size_t>(T) * s.nkv * s.hd);
  std::vector<float> v = randn(rng, k.size());
  for (auto* x : {&q, &k, &v}) round_all_bf16(*x);
  std::vector<double> want;
  ref::segment_attention_ref(q, expand_heads(k, T, s), expand_heads(v, T, s), lengths, s.nh, s.hd,
                             scale, causal, {}, want);
  const auto dq = to_device<bf16>(q), dk = to_device<bf16>(k), dv = to_device<bf16>(v);
  const size_t n = q.size();
  const size_t tiled = kv_tiled_elems(T, s.nkv, s.hd);
  engine::cuda::DeviceBuffer dkt(tiled * sizeof(bf16)), dvt(tiled * sizeof(bf16));
  tile_kv_bf16(dk.get<bf16>(), dkt.get<bf16>(), T, s.nkv, s.hd, nullptr);
  tile_kv_bf16(dv.get<bf16>(), dvt.get<bf16>(), T, s.nkv, s.hd, nullptr);
  bool block_aligned = true;  // every sequence starts on a 64-row block
  for (int i = 0, at = 0; i < S; at += lengths[i++]) block_aligned &= at % kKvTileRows == 0;
  std::map<std::string, std::vector<float>> hopper;  // the Hopper kernels' outputs, by name

  // The 1-stage kernel's output (Q in shared memory, no rescale skip), by warps and m-tiles.
  std::vector<std::vector<float>> baseline(32);
  int checked = 0;
  for (const AttnVariant& var : attention_bf16_variants()) {
    if (!attention_variant_supported(var, s.hd)) continue;
    ++checked;
    SCOPED_TRACE(testing::Message() << "variant " << attention_variant_name(var));
    const int rpt = attention_variant_rows_per_tile(var);
    std::vector<int32_t> host_tiles;
    if (table)
      host_tiles = causal ? pack_tables(lengths, T, S + 1, rpt).tiles : segment_tiles(lengths, rpt);
    engine::cuda::DeviceBuffer dtiles(std::max<size_t>(host_tiles.size(), 1) * 4);
    if (table) {
      CLEF_CUDA_CHECK(cudaMemcpy(dtiles.get(), host_tiles.data(), host_tiles.size() * 4,
                                 cudaMemcpyHostToDevice));
      size_t unused = 0;
      for (size_t i = 0; i < host_tiles.size(); i += 4) unused += host_tiles[i] < 0;
      EXPECT_GE(unused, 1u) << "the table should hold an unused slot";
    }
    AttnSequences seqs;
    seqs.tiles = table ? dtiles.get<int32_t>() : nullptr;
    seqs.tile_slots = static_cast<int>(host_tiles.size() / 4);
    seqs.causal = causal;
    seqs.scale = default_scale ? 0.f : static_cast<float>(scale);
    auto out = poisoned<bf16>(n);
    attention_core_bf16_variant(var, dq.get<bf16>(),
                                var.kv_tiled ? dkt.get<bf16>() : dk.get<bf16>(),
                                var.kv_tiled ? dvt.get<bf16>() : dv.get<bf16>(), out.get<bf16>(), T,
                                s.nh, s.nkv, s.hd, nullptr, &seqs);
    const std::vector<float> got = to_host<bf16>(out, n);
    size_t non_finite = 0;
    double num = 0, den = 0, max_abs = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(got[i])) {
        ++non_finite;
        continue;
      }
      const double d = got[i] - want[i];
      num += d * d, den += want[i] * want[i], max_abs = std::max(max_abs, std::abs(d));
    }
    const double rel_l2 = std::sqrt(num / std::max(den, 1e-300));
    EXPECT_EQ(non_finite, 0u);
    // As attention_core_test: bf16 output rounding alone is ~2^-9 relative, and P is rounded to
    // bf16 for the PV product.
    EXPECT_LT(rel_l2, 8e-3) << "max abs " << max_abs;
    EXPECT_LT(max_abs, 5e-2) << "rel l2 " << rel_l2;
    // attention_bf16_variants lists those 1-stage kernels before the variants of their shape.
    if (var.wgmma_key_tile) {
      // The Hopper kernel: other instructions, other summation order; the reference bounds only.
      // A key-tiled one runs the arithmetic of the kernel it tiles (the same fields reading rows;
      // where that is not built, its form without the overlap) on the same tiles where the blocks
      // align; the overlapped two-warpgroup one that of its plain form, everywhere.
      hopper[attention_variant_name(var)] = got;
      auto same_as = [&](const std::string& base, const char* where) {
        ASSERT_TRUE(hopper.contains(base)) << base << " runs wherever " << where;
        size_t differ = 0;
        for (size_t i = 0; i < n; ++i)
          differ += std::memcmp(&hopper[base][i], &got[i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0u) << attention_variant_name(var) << " differs from " << base << " ("
                              << where << ")";
      };
      if (var.kv_tiled && block_aligned) {
        AttnVariant rows = var;
        rows.kv_tiled = rows.release_barriers = false;
        if (!attention_variant_supported(rows, s.hd)) rows.wgmma_overlap = false;
        same_as(attention_variant_name(rows), "its key-tiled form does, block-aligned");
      }
      if (var.kv_tiled && var.wgmma_overlap && var.warps == 8) {
        AttnVariant plain = var;
        plain.wgmma_overlap = false;
        same_as(attention_variant_name(plain), "the overlapped form does");
      }
      if (var.kv_tiled && table && causal) {
        // A packed backbone forward's per-sequence key tiles (pack_tables' kv_rows and block0):
        // the form reading rows, bit for bit, however the sequences sit against the blocks.
        const PackTables pt = pack_tables(lengths, T, S + 1, rpt);
        const int hb = kv_head_blocks(T, S + 1);
        const size_t nt = kv_tiled_elems(T, s.nkv, s.hd, S + 1);
        std::vector<float> hk(nt, 0.f), hv(nt, 0.f);
        for (int r = 0; r < T; ++r)
          for (int h = 0; h < s.nkv; ++h)
            for (int c = 0; c < s.hd; ++c) {
              const size_t at = kv_tiled_at(pt.kv_rows[r], h, c, hb, s.hd);
              hk[at] = k[(size_t(r) * s.nkv + h) * s.hd + c];
              hv[at] = v[(size_t(r) * s.nkv + h) * s.hd + c];
            }
        const auto dks = to_device<bf16>(hk), dvs = to_device<bf16>(hv);
        AttnSequences per_seq = seqs;
        per_seq.kv_head_blocks = hb;
        auto out2 = poisoned<bf16>(n);
        attention_core_bf16_variant(var, dq.get<bf16>(), dks.get<bf16>(), dvs.get<bf16>(),
                                    out2.get<bf16>(), T, s.nh, s.nkv, s.hd, nullptr, &per_seq);
        const std::vector<float> got2 = to_host<bf16>(out2, n);
        AttnVariant rows = var;
        rows.kv_tiled = rows.release_barriers = false;
        if (!attention_variant_supported(rows, s.hd)) rows.wgmma_overlap = false;
        const std::string base = attention_variant_name(rows);
        ASSERT_TRUE(hopper.contains(base));
        size_t differ = 0;
        for (size_t i = 0; i < n; ++i)
          differ += std::memcmp(&hopper[base][i], &got2[i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0u) << attention_variant_name(var)
                              << " on per-sequence key tiles differs "
                              << "from " << base;
      }
      continue;
    }
    auto& base = baseline[var.warps * 3 + var.m_tiles];
    if (var.stages == 1 && !var.q_in_regs && !var.skip_rescale) {
      base = got;
    } else if (!base.empty()) {  // (w8m2s2 has no 1-stage kernel)
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i) differ += std::memcmp(&base[i], &got[i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0u) << "outputs differing from the 1-stage kernel of " << var.warps
                            << " warps x " << var.m_tiles << " m-tiles";
    }
  }
  EXPECT_GE(checked, 2) << "the default kernels run everywhere";
}

class AttentionVariants : public testing::TestWithParam<Shape> {};

TEST_P(AttentionVariants, MatchReferenceAndDefaultKernel) {
  CLEF_REQUIRE_GPU();
  const Shape s = GetParam();
  auto rng = fresh_rng();
  // Lengths around both tile sizes (64 and 128 rows), then long and short sequences mixed.
  // {64, 128, 192, 1} starts every sequence on a 64-row block (wg64o4t's tiles equal wg64o4's).
  const std::vector<std::vector<int>> packings = {
      {1, 63, 64, 65, 127, 128, 129}, {700, 3, 129, 1, 64}, {64, 128, 192, 1}};
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    for (int T : {1, 129, 300}) {
      SCOPED_TRACE(testing::Message() << "one sequence of " << T << ", no table");
      check_all_variants(s, {T}, causal, false, rng);
    }
    for (const auto& lengths : packings) {
      SCOPED_TRACE("packed " + comma_list(lengths));
      check_all_variants(s, lengths, causal, true, rng);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionVariants,
                         testing::Values(Shape{4, 4, 64}, Shape{8, 2, 64}, Shape{4, 4, 72},
                                         Shape{8, 2, 72}, Shape{4, 4, 80}, Shape{8, 2, 80},
                                         Shape{4, 4, 128}, Shape{8, 2, 128}, Shape{4, 4, 256},
                                         Shape{8, 2, 256}),
                         [](const testing::TestParamInfo<Shape>& i) {
                           return "hd" + std::to_string(i.param.hd) + "_gqa" +
                                  std::to_string(i.param.nh / i.param.nkv);
                         });

// The engine's pick (attention_core_bf16_pick, the shared-memory limit cached per device) on every
// device, asked twice: the Hopper kernel on sm_90, else (and under --kernels generic) w4m2s1
// (128-row tiles) at the tower's 72 and at 80 and w4s1 (64) at 256; a variant
// whose shared memory passes the device's limit is refused, one within it accepted. Skipped where
// CLEF_ATTN_PICK overrides the pick.
TEST(AttentionPick, PerDeviceAndStable) {
  CLEF_REQUIRE_GPU();
  if (std::getenv("CLEF_ATTN_PICK")) GTEST_SKIP() << "CLEF_ATTN_PICK is set";
  int devices = 0, current = 0;
  CLEF_CUDA_CHECK(cudaGetDeviceCount(&devices));
  CLEF_CUDA_CHECK(cudaGetDevice(&current));
  const AttnVariant tower{4, 1, false, 2, false}, plain{4, 1, false, 1, false};
  for (int d = 0; d < devices; ++d) {
    SCOPED_TRACE(testing::Message() << "device " << d);
    CLEF_CUDA_CHECK(cudaSetDevice(d));
    int major = 0, minor = 0;
    CLEF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d));
    CLEF_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d));
    // The Hopper kernel on sm_90 (the overlapped four-warpgroup variant at the tower's head dims,
    // the plain one at the backbone's 256), else and under --kernels generic w4m2s1 / w4s1.
    const bool hopper = major == 9 && minor == 0;
    const std::string tower_pick = hopper ? "wg64o4" : "w4m2s1";
    for (int round = 0; round < 2; ++round) {
      EXPECT_EQ(attention_variant_name(attention_core_bf16_pick(4096, 16, 72)), tower_pick);
      EXPECT_EQ(attention_variant_name(attention_core_bf16_pick(1024, 16, 80)), tower_pick);
      EXPECT_EQ(attention_variant_name(attention_core_bf16_pick(5661, 16, 256)),
                hopper ? "wg64" : "w4s1");
      EXPECT_EQ(attention_variant_name(attention_core_bf16_pick(4096, 16, 72, true)), "w4m2s1");
      // A caller that hands over key tiles (the tower) gets the key-tiled kernel on sm_90.
      EXPECT_EQ(attention_variant_name(attention_core_bf16_pick(4096, 16, 72, false, true)),
                hopper ? "wg64o4te" : "w4m2s1");
      EXPECT_EQ(attention_variant_name(attention_core_bf16_pick(4096, 16, 72, true, true)),
                "w4m2s1");
      EXPECT_EQ(attention_variant_name(attention_core_bf16_pick(5661, 16, 256, false, true)),
                hopper ? "wg64ote" : "w4s1");
      EXPECT_EQ(attention_variant_name(attention_core_bf16_pick(16384, 16, 256, false, true)),
                hopper ? "wg64te" : "w4s1");
      EXPECT_EQ(attention_variant_name(attention_core_bf16_pick(5661, 16, 256, true, true)),
                "w4s1");
      EXPECT_EQ(attention_variant_name(attention_core_bf16_pick(5661, 16, 256, true)), "w4s1");
      EXPECT_EQ(attention_rows_per_tile(true, 4096, 16, 72), hopper ? 256 : 128);
      EXPECT_EQ(attention_rows_per_tile(true, 4096, 16, 72, true), 128);
      EXPECT_EQ(attention_rows_per_tile(true, 5661, 16, 256), hopper ? 128 : 64);
      EXPECT_EQ(attention_rows_per_tile(true, 5661, 16, 256, true), 64);
      EXPECT_TRUE(attention_variant_supported(tower, 72));
      EXPECT_TRUE(attention_variant_supported(plain, 72));
      EXPECT_FALSE(attention_variant_supported({4, 2, false, 1, false}, 72));  // not built at 72
      int optin = 0;
      CLEF_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d));
      // w8s2 at 256: (128 + 4 x 64) rows x 264 x 2 B = 202752 bytes.
      EXPECT_EQ(attention_variant_supported({8, 2, false, 1, false}, 256), optin >= 202752);
    }
  }
  CLEF_CUDA_CHECK(cudaSetDevice(current));
}

// Host side: names round-trip, unknown names are refused.
TEST(AttentionVariantNames, RoundTripAndRefuseUnknown) {
  const auto all = attention_bf16_variants();
  ASSERT_GE(all.size(), 2u);
  EXPECT_TRUE((all[0] == AttnVariant{4, 1, false}));
  EXPECT_TRUE((all[1] == AttnVariant{8, 1, false}));
  for (const AttnVariant& v : all)
    EXPECT_TRUE(attention_variant_from_name(attention_variant_name(v)) == v);
  EXPECT_EQ(attention_variant_name({8, 2, true, 1}), "w8s2q");
  EXPECT_EQ(attention_variant_name({4, 2, false, 2}), "w4m2s2");
  EXPECT_EQ(attention_variant_rows_per_tile({4, 1, false, 2}), 128);
  EXPECT_EQ(attention_variant_name({4, 1, false, 2, true}), "w4m2s1r");
  AttnVariant tiled{16, 3, false, 1, false, 64, true, true};
  EXPECT_EQ(attention_variant_name(tiled), "wg64o4t");
  EXPECT_EQ(attention_variant_rows_per_tile(tiled), 256);
  tiled.release_barriers = true;
  EXPECT_EQ(attention_variant_name(tiled), "wg64o4te");
  EXPECT_THROW(attention_variant_from_name("w16s2"), std::invalid_argument);
  EXPECT_THROW(attention_variant_from_name(""), std::invalid_argument);
}

// tile_kv_bf16 against kv_tiled_index computed here: every element where it belongs, zeros in the
// padding columns (72 -> 80) and in the last block's rows past T (a poisoned destination).
TEST(KvTiles, TileKvMatchesTheIndex) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  EXPECT_EQ(kv_tile_cols(72), 80);
  EXPECT_EQ(kv_tile_cols(64), 64);
  EXPECT_EQ(kv_tiled_index(0, 0, 0, 130, 72), 0u);
  EXPECT_EQ(kv_tiled_index(1, 0, 0, 130, 72), 8u);      // row 1 of the first core matrix
  EXPECT_EQ(kv_tiled_index(0, 0, 8, 130, 72), 64u);     // the next 8 columns: the next matrix
  EXPECT_EQ(kv_tiled_index(8, 0, 0, 130, 72), 640u);    // rows 8..15 after one row of 10 matrices
  EXPECT_EQ(kv_tiled_index(64, 0, 0, 130, 72), 5120u);  // the second block
  EXPECT_EQ(kv_tiled_index(0, 1, 0, 130, 72), 3u * 5120u);  // head 1 after three blocks
  for (const int hd : {64, 72, 80})
    for (const int nkv : {1, 4})
      for (const int T : {1, 63, 64, 65, 200}) {
        SCOPED_TRACE(testing::Message() << "T " << T << " heads " << nkv << " hd " << hd);
        std::vector<float> x = randn(rng, size_t(T) * nkv * hd);
        round_all_bf16(x);
        const size_t n = kv_tiled_elems(T, nkv, hd);
        std::vector<float> want(n, 0.0f);
        for (int r = 0; r < T; ++r)
          for (int h = 0; h < nkv; ++h)
            for (int c = 0; c < hd; ++c)
              want[kv_tiled_index(r, h, c, T, hd)] = x[(size_t(r) * nkv + h) * hd + c];
        const auto src = to_device<bf16>(x);
        auto dst = poisoned<bf16>(n);
        tile_kv_bf16(src.get<bf16>(), dst.get<bf16>(), T, nkv, hd, nullptr);
        EXPECT_EQ(to_host<bf16>(dst, n), want);
      }
  EXPECT_THROW(tile_kv_bf16(nullptr, nullptr, 4, 1, 68, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace clef

// The tensor-core GDN path's launch forms (gdn/tensor_core.h TcLaunch): programmatic edges between
// prep, scan and output (the output kernel forming its P terms while the scan still runs), the
// scan at one or two CTAs an SM, a packed scan's 32 or 64 columns a CTA, and a packed scan's
// progress counts (each output CTA waiting for its own chunk while the scan runs). They change when
// kernels start, how registers are allocated and which CTA holds a column, never an operation or
// its order, so o (and the fused gated norm's y) must be bit for bit the same in every form; the
// plain form is also checked against the exact recurrence. Single sequences (961 tokens: a
// one-wave scan, where the early start applies) and packed batches whose scan grids pass one wave
// of SMs, both column splits, workspace and output NaN-poisoned. W's terms in the scan
// (TcLaunch::w_terms) do change the bits: each choice is checked on its own against the
// recurrence, and every launch form within a choice bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/gdn/tensor_core.h"
#include "engine/cuda/gdn_test_inputs.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/pack_test_util.h"
#include "engine/cuda/packing.h"
#include "support/ref/backbone_ref.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using namespace clef::gputest;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

using Shape = GdnHeads;

// The fused gated norm's operands (z [T, ldz] bf16, w [dv]) for `norm` cases.
struct NormOperands {
  DeviceBuffer z, w;
  GdnGatedNorm args;
  NormOperands(std::mt19937_64& rng, int T, const Shape& sh) {
    const int ldz = sh.Hv * sh.dv + 2;
    std::vector<float> zh = randn(rng, size_t(T) * ldz), wh = randu(rng, size_t(sh.dv), 0.5f, 1.5f);
    z = to_device<bf16>(zh), w = to_device<float>(wh);
    args = {z.get<bf16>(), ldz, w.get<float>(), 1e-6f};
  }
};

// o (or y) of one launch form, from a fresh NaN-poisoned workspace and output.
std::vector<uint16_t> run_form(const GdnInputs& in, const Shape& sh, int T, int slots,
                               const GdnSequences* seqs, const GdnGatedNorm* norm,
                               gdn::TcLaunch how) {
  DeviceBuffer ws(gdn_workspace_bytes(T, sh.Hv, sh.dk, sh.dv, slots));
  CLEF_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));
  const size_t no = size_t(T) * sh.Hv * sh.dv;
  auto o = poisoned<bf16>(no);
  gdn::chunked_tc(in, T, sh.Hk, sh.Hv, sh.dk, sh.dv, o.get<bf16>(), static_cast<float*>(ws.get()),
                  0, nullptr, nullptr, seqs, norm, false, how);
  CLEF_CUDA_CHECK(cudaDeviceSynchronize());
  const auto b = bytes_to_host(o, 2 * no);
  std::vector<uint16_t> out(no);
  for (size_t i = 0; i < no; ++i) out[i] = uint16_t(b[2 * i] | (b[2 * i + 1] << 8));
  return out;
}

std::vector<uint16_t> run_form(const GdnTestInputs& in, const Shape& sh, int T, int slots,
                               const GdnSequences* seqs, const GdnGatedNorm* norm,
                               gdn::TcLaunch how) {
  return run_form(in.form(true), sh, T, slots, seqs, norm, how);
}

// Values that differ, bit for bit, between two outputs of the same shape.
size_t count_differ(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
  return differ;
}

// The exact sequential recurrence of one sequence of T rows, [T, Hv, dv].
std::vector<float> recurrence(const GdnTestInputs& in, int T, const Shape& sh) {
  std::vector<float> expect(size_t(T) * sh.Hv * sh.dv);
  ref::gated_delta_rule_ref(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), T,
                            sh.Hk, sh.Hv, sh.dk, sh.dv, expect.data());
  return expect;
}

// The packed case of the terms and fused-core tests: short, chunk-boundary and long lengths.
const std::vector<int> kPackLengths{1, 63, 64, 65, 700, 1500};

std::vector<float> widen(const std::vector<uint16_t>& h) {
  std::vector<float> o(h.size());
  for (size_t i = 0; i < o.size(); ++i) {
    const uint32_t bits = uint32_t(h[i]) << 16;
    std::memcpy(&o[i], &bits, 4);
  }
  return o;
}

// Every form against the plain one (no edges, one CTA an SM), bit for bit, all with W in w_terms
// terms (0: the process's choice); the plain o against `expect` (the reference) where given.
// Returns the plain o.
std::vector<uint16_t> expect_forms_agree(const GdnTestInputs& in, const Shape& sh, int T, int slots,
                                         const GdnSequences* seqs, const GdnGatedNorm* norm,
                                         const std::vector<float>* expect, int w_terms = 0) {
  const auto plain = run_form(in, sh, T, slots, seqs, norm, {0, 1, w_terms, 0});
  // {pdl, scan_blocks, w_terms, longest_first, s_terms, v_terms, scan_nt, fused, fused_groups,
  // progress}; progress applies to packs only (the output CTAs waiting on the scan's counts).
  const gdn::TcLaunch forms[] = {{0, 1, w_terms, 1},
                                 {1, 1, w_terms, 1, 0, 0, 0, 0, 0, -1},
                                 {0, 2, w_terms, 0},
                                 {1, 2, w_terms, 1, 0, 0, 0, 0, 0, -1},
                                 {-1, 0, w_terms, -1},
                                 {1, 1, w_terms, 1, 0, 0, 4, 0, 0, -1},
                                 {1, 1, w_terms, 1, 0, 0, 8, 0, 0, -1},
                                 {1, 1, w_terms, 1, 0, 0, 4, 0, 0, 1},
                                 {1, 1, w_terms, 1, 0, 0, 8, 0, 0, 1},
                                 {1, 1, w_terms, 0, 0, 0, 8, 0, 0, 1},
                                 {1, 2, w_terms, 1, 0, 0, 0, 0, 0, 1}};
  for (const gdn::TcLaunch& f : forms) {
    SCOPED_TRACE("pdl " + std::to_string(f.pdl) + " scan_blocks " + std::to_string(f.scan_blocks) +
                 " longest_first " + std::to_string(f.longest_first) + " scan_nt " +
                 std::to_string(f.scan_nt) + " progress " + std::to_string(f.progress));
    const auto got = run_form(in, sh, T, slots, seqs, norm, f);
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != plain[i] && differ++ == 0) first = i;
    EXPECT_EQ(differ, 0u) << "of " << got.size() << " values; first at " << first << " (row "
                          << first / (size_t(sh.Hv) * sh.dv) << ")";
  }
  if (expect) CLEF_EXPECT_CLOSE(widen(plain), *expect, 1e-2);
  return plain;
}

TEST(GdnLaunch, SingleSequencesGiveTheSameBitsInEveryForm) {
  CLEF_REQUIRE_GPU();
  if (!gdn::tc_supported(128, 128)) GTEST_SKIP() << "no tensor-core GDN path on this device";
  auto rng = fresh_rng();
  struct Case {
    Shape sh;
    int T;
    bool norm;
  };
  const Case cases[] = {{{16, 32, 128, 128}, 961, false},
                        {{16, 32, 128, 128}, 961, true},
                        {{16, 32, 128, 128}, 65, true},
                        {{16, 48, 128, 128}, 300, false},
                        {{2, 6, 32, 48}, 130, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE("T " + std::to_string(c.T) + " Hv " + std::to_string(c.sh.Hv) + " dv " +
                 std::to_string(c.sh.dv) + (c.norm ? " with the gated norm" : ""));
    const GdnTestInputs in = gdn_test_inputs(rng, c.T, c.sh.Hk, c.sh.Hv, c.sh.dk, c.sh.dv, -2.0f);
    if (c.norm) {
      const NormOperands nrm(rng, c.T, c.sh);
      expect_forms_agree(in, c.sh, c.T, 1, nullptr, &nrm.args, nullptr);
    } else {
      const std::vector<float> expect = recurrence(in, c.T, c.sh);
      expect_forms_agree(in, c.sh, c.T, 1, nullptr, nullptr, &expect);
    }
  }
}

TEST(GdnLaunch, PackedBatchesGiveTheSameBitsInEveryForm) {
  CLEF_REQUIRE_GPU();
  if (!gdn::tc_supported(128, 128)) GTEST_SKIP() << "no tensor-core GDN path on this device";
  auto rng = fresh_rng();
  for (Shape sh : {Shape{16, 32, 128, 128}, Shape{2, 6, 32, 48}}) {
    for (const auto& lengths : packings(rng)) {
      SCOPED_TRACE("lengths " + comma_list(lengths) + " dv " + std::to_string(sh.dv));
      const PackedGdnCase c(rng, lengths, sh.Hk, sh.Hv, sh.dk, sh.dv);
      expect_forms_agree(c.in, sh, c.T, c.slots, &c.dev.gdn, nullptr, &c.expect);
      if (sh.dv == 128) {
        const NormOperands nrm(rng, c.T, sh);
        expect_forms_agree(c.in, sh, c.T, c.slots, &c.dev.gdn, &nrm.args, nullptr);
      }
    }
  }
}

// The packed scan's longest-first order (ChunkMap::longest_first) against a stable sort of the
// slots by chunk count, most first: slot counts 1 .. 64 (one and two warps' worth of lanes), ties,
// empty slots (a sequence bucket's unused ones) and random tables.
TEST(GdnLaunch, LongestFirstOrderIsAStableSortByChunks) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  std::vector<std::vector<int>> tables = {{5}, {0, 3}, {3, 3}, {1, 9, 9, 0, 2}, {16, 16, 5, 0, 0}};
  for (int n : {2, 7, 8, 31, 32, 33, 63, 64}) {
    std::uniform_int_distribution<int> chunks(0, n % 2 ? 4 : 90);  // few values: many ties
    std::vector<int> t(n);
    for (int& c : t) c = chunks(rng);
    tables.push_back(t);
  }
  for (const auto& counts : tables) {
    SCOPED_TRACE("chunks " + comma_list(counts));
    std::vector<int32_t> seq0{0};
    for (int c : counts) seq0.push_back(seq0.back() + c);
    std::vector<int> want(counts.size());
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](int a, int b) { return counts[a] > counts[b]; });
    EXPECT_EQ(gdn::scan_sequence_order(seq0), want);
  }
}

// W in one bf16 term (CLEF_GDN_W_TERMS=1) and in two: each close to the exact recurrence in every
// launch form, and different from each other (the choice reaches the scan).
TEST(GdnLaunch, WTermsEachMatchTheRecurrence) {
  CLEF_REQUIRE_GPU();
  if (!gdn::tc_supported(128, 128)) GTEST_SKIP() << "no tensor-core GDN path on this device";
  auto rng = fresh_rng();
  const Shape sh{16, 32, 128, 128};
  auto check = [&](const GdnTestInputs& in, int T, int slots, const GdnSequences* seqs,
                   const std::vector<float>& expect) {
    const auto one = expect_forms_agree(in, sh, T, slots, seqs, nullptr, &expect, 1);
    const auto two = expect_forms_agree(in, sh, T, slots, seqs, nullptr, &expect, 2);
    const size_t differ = count_differ(one, two);
    EXPECT_GT(differ, 0u);
    const auto e1 = compare(widen(one), expect), e2 = compare(widen(two), expect);
    std::printf(
        "[gdn W terms, T %d, %d sequence slots: rel L2 vs the recurrence 1 term %.3g, "
        "2 terms %.3g; %zu of %zu values differ]\n",
        T, slots, e1.rel_l2, e2.rel_l2, differ, one.size());
  };
  {
    const int T = 961;
    const GdnTestInputs in = gdn_test_inputs(rng, T, sh.Hk, sh.Hv, sh.dk, sh.dv, -2.0f);
    SCOPED_TRACE("961 tokens");
    check(in, T, 1, nullptr, recurrence(in, T, sh));
  }
  SCOPED_TRACE("lengths " + comma_list(kPackLengths));
  const PackedGdnCase c(rng, kPackLengths, sh.Hk, sh.Hv, sh.dk, sh.dv);
  check(c.in, c.T, c.slots, &c.dev.gdn, c.expect);
}

// The chain's other lo terms (TcLaunch::s_terms, v_terms: the published state in W S, diag(F) Vn
// in the state update), one at a time and all three with W's at once (FlashInfer's one-term
// chain): each close to the exact recurrence and different from the default's bits.
TEST(GdnLaunch, ChainTermsEachMatchTheRecurrence) {
  CLEF_REQUIRE_GPU();
  if (!gdn::tc_supported(128, 128)) GTEST_SKIP() << "no tensor-core GDN path on this device";
  auto rng = fresh_rng();
  const Shape sh{16, 32, 128, 128};
  SCOPED_TRACE("lengths " + comma_list(kPackLengths));
  const PackedGdnCase c(rng, kPackLengths, sh.Hk, sh.Hv, sh.dk, sh.dv);
  const auto base = run_form(c.in, sh, c.T, c.slots, &c.dev.gdn, nullptr, {0, 1, 2, 0, 2, 2});
  const auto eb = compare(widen(base), c.expect);
  struct Terms {
    int w, s, v;
  };
  for (const Terms t : {Terms{2, 1, 2}, Terms{2, 2, 1}, Terms{1, 1, 1}}) {
    SCOPED_TRACE("terms W " + std::to_string(t.w) + " S " + std::to_string(t.s) + " F Vn " +
                 std::to_string(t.v));
    const auto got =
        run_form(c.in, sh, c.T, c.slots, &c.dev.gdn, nullptr, {0, 1, t.w, 0, t.s, t.v});
    const size_t differ = count_differ(got, base);
    EXPECT_GT(differ, 0u);
    CLEF_EXPECT_CLOSE(widen(got), c.expect, 1e-2);
    const auto e = compare(widen(got), c.expect);
    std::printf(
        "[gdn chain terms W %d S %d F Vn %d: rel L2 vs the recurrence %.3g (all two-term %.3g); "
        "%zu of %zu values differ]\n",
        t.w, t.s, t.v, e.rel_l2, eb.rel_l2, differ, got.size());
  }
}

// The fused core (opt-in, TcLaunch::fused; perf-log v25d, v26a): o against the exact
// recurrence as the three kernels' (single sequences and a packed batch with short and boundary
// lengths), y with the fused gated norm against the three kernels' y, and both sequence orders
// bit for bit (a sequence's work does not depend on which block runs it).
TEST(GdnLaunch, FusedCoreMatchesTheRecurrence) {
  CLEF_REQUIRE_GPU();
  if (!gdn::fused_supported(128, 128)) GTEST_SKIP() << "no fused GDN core on this device";
  auto rng = fresh_rng();
  const Shape sh{16, 32, 128, 128};
  const gdn::TcLaunch plain{0, 1, 0, 0, 0, 0, 0, -1}, fused{0, 1, 0, 0, 0, 0, 0, 1, 2},
      fused_longest{1, 1, 0, 1, 0, 0, 0, 1, 2}, fused16{0, 1, 0, 0, 0, 0, 0, 1, 4};
  auto check = [&](const GdnTestInputs& in, int T, int slots, const GdnSequences* seqs,
                   const std::vector<float>& expect) {
    const auto three = run_form(in, sh, T, slots, seqs, nullptr, plain);
    const auto one = run_form(in, sh, T, slots, seqs, nullptr, fused);
    CLEF_EXPECT_CLOSE(widen(one), expect, 1e-2);
    const auto e1 = compare(widen(one), expect), e3 = compare(widen(three), expect);
    std::printf(
        "[gdn fused core, T %d, %d sequence slots: rel L2 vs the recurrence %.3g (three "
        "kernels %.3g)]\n",
        T, slots, e1.rel_l2, e3.rel_l2);
    const auto again = run_form(in, sh, T, slots, seqs, nullptr, fused_longest);
    EXPECT_EQ(count_differ(one, again), 0u) << "fused core: slot order vs longest first";
    // Sixteen warps (four column groups): every column's sums in the same order, the same o.
    const auto wide = run_form(in, sh, T, slots, seqs, nullptr, fused16);
    EXPECT_EQ(count_differ(one, wide), 0u) << "fused core: four column groups vs two";
    const NormOperands nrm(rng, T, sh);
    const auto y3 = run_form(in, sh, T, slots, seqs, &nrm.args, plain);
    const auto y1 = run_form(in, sh, T, slots, seqs, &nrm.args, fused);
    CLEF_EXPECT_CLOSE(widen(y1), widen(y3), 2e-2);
    const auto y4 = run_form(in, sh, T, slots, seqs, &nrm.args, fused16);
    CLEF_EXPECT_CLOSE(widen(y4), widen(y3), 2e-2);
  };
  for (int T : {64, 961}) {
    SCOPED_TRACE("one sequence of " + std::to_string(T));
    const GdnTestInputs in = gdn_test_inputs(rng, T, sh.Hk, sh.Hv, sh.dk, sh.dv, -2.0f);
    check(in, T, 1, nullptr, recurrence(in, T, sh));
  }
  SCOPED_TRACE("lengths " + comma_list(kPackLengths));
  const PackedGdnCase c(rng, kPackLengths, sh.Hk, sh.Hv, sh.dk, sh.dv);
  check(c.in, c.T, c.slots, &c.dev.gdn, c.expect);
}

// Both cores launched per pack (TcLaunch::fused 2, GdnSequences::fused: what a captured packed
// graph runs where CLEF_GDN_FUSED=auto): the device flag's core gives exactly its own bits and the
// other core's kernels leave the output alone, o and the fused norm's y alike.
TEST(GdnLaunch, PerPackCoreRunsTheChosenCoreBitForBit) {
  CLEF_REQUIRE_GPU();
  if (!gdn::fused_supported(128, 128)) GTEST_SKIP() << "no fused GDN core on this device";
  auto rng = fresh_rng();
  const Shape sh{16, 32, 128, 128};
  SCOPED_TRACE("lengths " + comma_list(kPackLengths));
  const PackedGdnCase c(rng, kPackLengths, sh.Hk, sh.Hv, sh.dk, sh.dv);
  const NormOperands nrm(rng, c.T, sh);
  const gdn::TcLaunch three{0, 1, 0, 0, 0, 0, 0, -1}, fused{0, 1, 0, 0, 0, 0, 0, 1},
      per_pack{1, 1, 0, 1, 0, 0, 0, 2};
  DeviceBuffer flag(sizeof(int32_t));
  GdnSequences seqs = c.dev.gdn;
  seqs.fused = flag.get<int32_t>();
  for (const GdnGatedNorm* norm : {static_cast<const GdnGatedNorm*>(nullptr), &nrm.args}) {
    for (int32_t choice : {0, 1}) {
      SCOPED_TRACE(std::string(norm ? "y" : "o") + ", flag " + std::to_string(choice));
      CLEF_CUDA_CHECK(cudaMemcpy(flag.get(), &choice, sizeof(choice), cudaMemcpyHostToDevice));
      const auto want = run_form(c.in, sh, c.T, c.slots, &c.dev.gdn, norm, choice ? fused : three);
      const auto got = run_form(c.in, sh, c.T, c.slots, &seqs, norm, per_pack);
      EXPECT_EQ(count_differ(got, want), 0u) << "of " << got.size() << " values";
    }
  }
}

// The chunk's prefix sums of the log-decays (chunk_cumsum, both GDN paths): prefix i reads g[0..i]
// only, bit for bit whatever follows, so a sequence's last rows get the same gamma inside a pack
// (nothing after them in the chunk) and alone (its bucket's padding after them); each within fp32
// rounding of the double-precision sum. Before session 33 the rows of an odd count failed this.
TEST(GdnLaunch, ChunkPrefixSumsReadOnlyTheRowsBefore) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  const std::vector<float> g = randu(rng, 64, -2.0f, 0.0f);  // log-decays are <= 0
  const std::vector<float> full = gdn::chunk_prefix_sums(g);
  double sum = 0.0;
  for (int i = 0; i < 64; ++i) {
    sum += g[i];
    EXPECT_NEAR(full[i], sum, 1e-5 * (1.0 + std::abs(sum))) << "prefix " << i;
  }
  auto bits = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
  };
  size_t differ = 0;
  for (int rows = 1; rows < 64; ++rows) {
    std::vector<float> cut(g.begin(), g.begin() + rows), other;
    cut.resize(64, 0.0f);  // in a pack: nothing after the sequence's rows
    other = cut;
    const std::vector<float> pad = randu(rng, 64 - size_t(rows), -2.0f, 0.0f);
    std::copy(pad.begin(), pad.end(), other.begin() + rows);  // alone: padding rows after them
    const std::vector<float> a = gdn::chunk_prefix_sums(cut), b = gdn::chunk_prefix_sums(other);
    for (int i = 0; i < rows; ++i)
      differ += bits(a[i]) != bits(full[i]) || bits(b[i]) != bits(full[i]);
  }
  EXPECT_EQ(differ, 0u) << "of 2016 prefixes read a row after them";
}

// Batch invariance (batch_invariance.h): each sequence of a pack, run alone from its own rows of
// the same inputs, gives the bits it gives inside the pack, o and the fused norm's y, in the
// process's launch form (the three kernels: a lone request never runs the fused core).
TEST(GdnLaunch, PackedSequencesGiveTheirBitsAlone) {
  CLEF_REQUIRE_GPU();
  if (!gdn::tc_supported(128, 128)) GTEST_SKIP() << "no tensor-core GDN path on this device";
  auto rng = fresh_rng();
  const Shape sh{16, 32, 128, 128};
  const std::vector<int> lengths{65, 1, 700, 63, 64, 37, 1500};
  SCOPED_TRACE("lengths " + comma_list(lengths));
  const PackedGdnCase c(rng, lengths, sh.Hk, sh.Hv, sh.dk, sh.dv);
  const NormOperands nrm(rng, c.T, sh);
  // The three kernels, with the mma.sync scan and (where the device has it) the wgmma one.
  std::vector<gdn::TcLaunch> scans{{-1, 0, 0, -1, 0, 0, 0, -1}};
  scans[0].scan_wgmma = -1;
  if (gdn::scan_wgmma_supported(sh.dk, sh.dv)) {
    scans.push_back(scans[0]);
    scans[1].scan_wgmma = 1, scans[1].scan_blocks = 1;
  }
  for (const gdn::TcLaunch& three : scans)
    for (const GdnGatedNorm* norm : {static_cast<const GdnGatedNorm*>(nullptr), &nrm.args}) {
      SCOPED_TRACE(three.scan_wgmma == 1 ? "wgmma scan" : "mma.sync scan");
      const auto packed = run_form(c.in, sh, c.T, c.slots, &c.dev.gdn, norm, three);
      const size_t row = size_t(sh.Hv) * sh.dv;
      for (size_t i = 0; i < lengths.size(); ++i) {
        const int b = c.tables.begin[i], L = lengths[i];
        SCOPED_TRACE(std::string(norm ? "y" : "o") + ", sequence " + std::to_string(i) +
                     " at row " + std::to_string(b));
        GdnInputs in = c.in.form(true);  // the sequence's own rows of every input
        in.xq += size_t(b) * sh.Hk * sh.dk, in.xk += size_t(b) * sh.Hk * sh.dk;
        in.xv += size_t(b) * row, in.rq += size_t(b) * sh.Hk, in.rk += size_t(b) * sh.Hk;
        in.g += size_t(b) * sh.Hv, in.beta += size_t(b) * sh.Hv;
        GdnGatedNorm own;
        if (norm) own = *norm, own.z += size_t(b) * norm->ldz;
        const auto alone = run_form(in, sh, L, 1, nullptr, norm ? &own : nullptr, three);
        const std::vector<uint16_t> inside(packed.begin() + b * row,
                                           packed.begin() + (b + L) * row);
        EXPECT_EQ(count_differ(alone, inside), 0u) << "of " << alone.size() << " values";
        // As a lone request runs: its rows, then its bucket's padding rows (here the rows that
        // follow it, up to 40) in the same chunks; its own rows must not change.
        const int padded = std::min(L + 40, c.T - b);
        if (padded > L) {
          const auto with_pad = run_form(in, sh, padded, 1, nullptr, norm ? &own : nullptr, three);
          const std::vector<uint16_t> own_rows(with_pad.begin(),
                                               with_pad.begin() + size_t(L) * row);
          EXPECT_EQ(count_differ(own_rows, inside), 0u)
              << "of " << own_rows.size() << " values, alone with " << padded - L
              << " padding rows after it";
        }
      }
    }
}

// The scan's chain on warpgroup MMAs (TcLaunch::scan_wgmma, perf-log v32a-d): it runs where asked
// in every launch form (edges, progress counts, sequence order, 32 or 64 columns) and gives the
// mma.sync scan's bits there (a column's k16 products and its accumulations in the same order), so
// it can be the default without moving any answer; and it stays as close to the exact recurrence:
// single sequences (32 columns) and a packed batch (64), with the gated norm too.
TEST(GdnLaunch, WgmmaScanGivesTheMmaSyncScansBitsInEveryForm) {
  CLEF_REQUIRE_GPU();
  if (!gdn::scan_wgmma_supported(128, 128)) GTEST_SKIP() << "no wgmma GDN scan on this device";
  auto rng = fresh_rng();
  const Shape sh{16, 32, 128, 128};
  auto form = [](int pdl, int longest, int nt, int progress, int wgmma) {
    gdn::TcLaunch f{pdl, 1, 0, longest, 0, 0, nt, -1, 0, progress};
    f.scan_wgmma = wgmma;
    return f;
  };
  auto check = [&](const GdnTestInputs& in, int T, int slots, const GdnSequences* seqs,
                   const GdnGatedNorm* norm, const std::vector<float>* expect) {
    const auto sync = run_form(in, sh, T, slots, seqs, norm, form(0, 1, 0, -1, -1));
    const gdn::TcLaunch forms[] = {form(0, 1, 0, -1, 1), form(1, 1, 0, -1, 1),
                                   form(1, 1, 8, 1, 1),  form(1, 1, 4, 1, 1),
                                   form(1, 0, 8, 1, 1),  form(-1, -1, 0, 0, 1)};
    std::vector<uint16_t> wg;
    for (gdn::TcLaunch f : forms) {
      SCOPED_TRACE("pdl " + std::to_string(f.pdl) + " longest_first " +
                   std::to_string(f.longest_first) + " scan_nt " + std::to_string(f.scan_nt) +
                   " progress " + std::to_string(f.progress));
      bool ran = false;
      f.scan_wgmma_ran = &ran;
      wg = run_form(in, sh, T, slots, seqs, norm, f);
      EXPECT_TRUE(ran) << "the mma.sync scan ran where the wgmma one was asked for";
      EXPECT_EQ(count_differ(wg, sync), 0u) << "of " << wg.size() << " values";
    }
    bool ran = true;
    gdn::TcLaunch off = form(0, 1, 0, -1, -1);
    off.scan_wgmma_ran = &ran;
    run_form(in, sh, T, slots, seqs, norm, off);
    EXPECT_FALSE(ran) << "scan_wgmma -1 ran the wgmma scan";
    if (expect) {
      CLEF_EXPECT_CLOSE(widen(wg), *expect, 1e-2);
      std::printf("[gdn wgmma scan, T %d, %d sequence slots: rel L2 vs the recurrence %.3g]\n", T,
                  slots, compare(widen(wg), *expect).rel_l2);
    }
  };
  for (int T : {961, 65}) {
    SCOPED_TRACE("T " + std::to_string(T));
    const GdnTestInputs in = gdn_test_inputs(rng, T, sh.Hk, sh.Hv, sh.dk, sh.dv, -2.0f);
    const std::vector<float> expect = recurrence(in, T, sh);
    check(in, T, 1, nullptr, nullptr, &expect);
    const NormOperands nrm(rng, T, sh);
    check(in, T, 1, nullptr, &nrm.args, nullptr);
  }
  SCOPED_TRACE("lengths " + comma_list(kPackLengths));
  const PackedGdnCase c(rng, kPackLengths, sh.Hk, sh.Hv, sh.dk, sh.dv);
  check(c.in, c.T, c.slots, &c.dev.gdn, nullptr, &c.expect);
  const NormOperands nrm(rng, c.T, sh);
  check(c.in, c.T, c.slots, &c.dev.gdn, &nrm.args, nullptr);
}

}  // namespace
}  // namespace clef

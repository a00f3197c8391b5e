// The scan that also forms o (gdn/gdn.h GdnOutputMode::InScan: four output warps in every scan CTA,
// a chunk behind the recurrence) against the output kernel it replaces (GdnOutputMode::Kernel):
// bit for bit the same o, since both run the same products, splits and roundings in the same
// order; and against the exact sequential recurrence. Lengths around the chunk and long enough for
// the buffers to wrap (961: 16 chunks over 4 state buffers and 2 slots), both column splits of the
// scan (dv % 32 == 0: 32 columns a CTA; 48 and 16: 16), strong decay, packed batches with unused
// sequence slots. Workspace and outputs are NaN-poisoned first: the in-scan mode must read neither
// the published states nor Vn from memory, and must write every row.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/gdn/tensor_core.h"
#include "engine/cuda/gdn_test_inputs.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/kernel_path.h"
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

// o of one mode on the inputs (fresh NaN-poisoned workspace and output).
DeviceBuffer run_mode(const GdnTestInputs& in, const Shape& sh, int T, int slots,
                      const GdnSequences* seqs, GdnOutputMode mode) {
  DeviceBuffer ws(gdn_workspace_bytes(T, sh.Hv, sh.dk, sh.dv, slots));
  CLEF_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));
  auto o = poisoned<bf16>(size_t(T) * sh.Hv * sh.dv);
  gdn_chunked<bf16>(in.form(true), T, sh.Hk, sh.Hv, sh.dk, sh.dv, o.get<bf16>(), ws.get(),
                    KernelPath::Auto, 0, nullptr, nullptr, seqs, nullptr, mode);
  return o;
}

// In-scan o equals the output kernel's bit for bit, and the reference within the GDN tests' bf16
// bound; `expect` is the reference for the rows.
void expect_in_scan_matches(const GdnTestInputs& in, const Shape& sh, int T, int slots,
                            const GdnSequences* seqs, const std::vector<float>& expect) {
  const size_t no = size_t(T) * sh.Hv * sh.dv;
  const auto kernel = run_mode(in, sh, T, slots, seqs, GdnOutputMode::Kernel);
  const auto in_scan = run_mode(in, sh, T, slots, seqs, GdnOutputMode::InScan);
  const auto a = bytes_to_host(kernel, 2 * no), b = bytes_to_host(in_scan, 2 * no);
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < no; ++i)
    if ((a[2 * i] != b[2 * i] || a[2 * i + 1] != b[2 * i + 1]) && differ++ == 0) first = i;
  EXPECT_EQ(differ, 0u) << "of " << no << " values; first at " << first << " (row "
                        << first / (size_t(sh.Hv) * sh.dv) << ")";
  CLEF_EXPECT_CLOSE(to_host<bf16>(in_scan, no), expect, 1e-2);
}

TEST(GdnScanOutput, MatchesTheOutputKernelBitForBit) {
  CLEF_REQUIRE_GPU();
  if (!gdn::tc_scan_output_supported(128, 128))
    GTEST_SKIP() << "this device does not grant the in-scan output's shared memory";
  auto rng = fresh_rng();
  struct Case {
    Shape sh;
    int T;
    float g_min;
  };
  std::vector<Case> cases;
  for (int T : {1, 63, 64, 65, 130, 961}) cases.push_back({{16, 32, 128, 128}, T, -2.0f});
  for (int T : {1, 65, 300}) cases.push_back({{2, 6, 32, 48}, T, -2.0f});  // 16 columns a CTA
  cases.push_back({{2, 4, 16, 16}, 200, -2.0f});                           // one k16 step
  cases.push_back({{4, 8, 64, 64}, 150, -40.0f});                          // strong decay
  cases.push_back({{16, 32, 128, 128}, 1100, -0.3f});                      // slow decay
  for (const Case& c : cases) {
    SCOPED_TRACE("T " + std::to_string(c.T) + " dk " + std::to_string(c.sh.dk) + " dv " +
                 std::to_string(c.sh.dv) + " g_min " + std::to_string(c.g_min));
    ASSERT_TRUE(gdn::tc_scan_output_supported(c.sh.dk, c.sh.dv));
    const GdnTestInputs in = gdn_test_inputs(rng, c.T, c.sh.Hk, c.sh.Hv, c.sh.dk, c.sh.dv, c.g_min);
    std::vector<float> expect(size_t(c.T) * c.sh.Hv * c.sh.dv);
    ref::gated_delta_rule_ref(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                              c.T, c.sh.Hk, c.sh.Hv, c.sh.dk, c.sh.dv, expect.data());
    expect_in_scan_matches(in, c.sh, c.T, 1, nullptr, expect);
  }
}

TEST(GdnScanOutput, PackedSequencesMatchTheOutputKernelBitForBit) {
  CLEF_REQUIRE_GPU();
  if (!gdn::tc_scan_output_supported(128, 128))
    GTEST_SKIP() << "this device does not grant the in-scan output's shared memory";
  // gdn_chunked takes the process's launch choices: CLEF_GDN_FUSED=1 (an A/B switch that changes
  // the bits) replaces the output kernel this test compares against.
  if (gdn_fused_mode() == GdnFusedMode::On)
    GTEST_SKIP() << "CLEF_GDN_FUSED=1: no output kernel to compare with";
  auto rng = fresh_rng();
  for (Shape sh : {Shape{16, 32, 128, 128}, Shape{2, 6, 32, 48}}) {
    for (const auto& lengths : packings(rng)) {
      SCOPED_TRACE("lengths " + comma_list(lengths) + " dv " + std::to_string(sh.dv));
      const PackedGdnCase c(rng, lengths, sh.Hk, sh.Hv, sh.dk, sh.dv);
      expect_in_scan_matches(c.in, sh, c.T, c.slots, &c.dev.gdn, c.expect);
    }
  }
}

// The mode exists on the tensor-core path only, without the gated norm epilogue; asking for it
// elsewhere is an error, not a silent fallback.
TEST(GdnScanOutput, RefusedWhereItDoesNotApply) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  const int T = 70, Hk = 2, Hv = 4, d = 32;
  const GdnTestInputs in = gdn_test_inputs(rng, T, Hk, Hv, d, d, -2.0f);
  DeviceBuffer ws(gdn_workspace_bytes(T, Hv, d, d));
  auto o = poisoned<float>(size_t(T) * Hv * d);  // room for either output type
  const auto z = to_device<bf16>(std::vector<float>(size_t(T) * Hv * d, 1.0f));
  const auto w = to_device<float>(std::vector<float>(d, 1.0f));
  const GdnGatedNorm nrm{z.get<bf16>(), Hv * d, w.get<float>(), 1e-6f};
  EXPECT_THROW(gdn_chunked<float>(in.form(false), T, Hk, Hv, d, d, o.get<float>(), ws.get(),
                                  KernelPath::Auto, 0, nullptr, nullptr, nullptr, nullptr,
                                  GdnOutputMode::InScan),
               std::invalid_argument);
  EXPECT_THROW(gdn_chunked<bf16>(in.form(false), T, Hk, Hv, d, d, o.get<bf16>(), ws.get(),
                                 KernelPath::Generic, 0, nullptr, nullptr, nullptr, nullptr,
                                 GdnOutputMode::InScan),
               std::invalid_argument);
  if (gdn::tc_supported(d, d)) {
    EXPECT_THROW(
        gdn_chunked<bf16>(in.form(true), T, Hk, Hv, d, d, o.get<bf16>(), ws.get(), KernelPath::Auto,
                          0, nullptr, nullptr, nullptr, &nrm, GdnOutputMode::InScan),
        std::invalid_argument);
  }
}

}  // namespace
}  // namespace clef

// The gated RMSNorm fused into the tensor-core GDN output kernel (gdn/gdn.h GdnGatedNorm) against
// the unfused pair the engine ran before it: the output kernel writing o, then gated_rms_norm
// (kernels/norm.h) over o and z. Lengths around the chunk (1, 63, 64, 65, 961), packed batches
// (engine/cuda/packing.h) with unused sequence slots, the flash head shape and small heads whose
// dv leaves some of the kernel's eight column warps idle; outputs NaN-poisoned first.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/gdn_test_inputs.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/norm.h"
#include "engine/cuda/pack_test_util.h"
#include "engine/cuda/packing.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using namespace clef::gputest;
using bf16 = __nv_bfloat16;

struct Shape {
  int Hk, Hv, dk, dv, ldz_extra;  // ldz = Hv dv + extra
};

// One run of both forms on the same inputs; `seqs` (optional) packs the T rows.
void expect_fused_matches(std::mt19937_64& rng, const Shape& sh, int T, int slots,
                          const GdnSequences* seqs) {
  ASSERT_TRUE(gdn_fuses_gated_norm(sh.dk, sh.dv, true, KernelPath::Auto));
  const GdnTestInputs in = gdn_test_inputs(rng, T, sh.Hk, sh.Hv, sh.dk, sh.dv, -2.0f);
  // z as a slice of a wider row (the in_proj output); 16-byte aligned where ldz is a multiple of 8
  // (the vec8 norm as reference), else 2 elements in (the generic one)
  const int ldz = sh.Hv * sh.dv + sh.ldz_extra, zoff = ldz % 8 == 0 ? 8 : 2;
  auto z = randn(rng, size_t(T) * ldz + zoff, 2.0f);
  round_all_bf16(z);
  auto w = randn(rng, size_t(sh.dv), 0.5f, 1.0f);
  const float eps = 1e-6f;
  auto dz = to_device<bf16>(z), dw = to_device<float>(w);
  const size_t no = size_t(T) * sh.Hv * sh.dv;
  DeviceBuffer ws(gdn_workspace_bytes(T, sh.Hv, sh.dk, sh.dv, slots));
  auto run = [&](bf16* out, const GdnGatedNorm* nrm) {
    CLEF_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));
    gdn_chunked<bf16>(in.form_for(sh.dk, sh.dv, true, KernelPath::Auto), T, sh.Hk, sh.Hv, sh.dk,
                      sh.dv, out, ws.get(), KernelPath::Auto, 0, nullptr, nullptr, seqs, nrm);
  };
  auto o = poisoned<bf16>(no), want = poisoned<bf16>(no), got = poisoned<bf16>(no);
  run(o.get<bf16>(), nullptr);
  gated_rms_norm<bf16>(o.get<bf16>(), dz.get<bf16>() + zoff, ldz, dw.get<float>(), want.get<bf16>(),
                       T, sh.Hv, sh.dv, eps, KernelPath::Auto, 0);
  const GdnGatedNorm nrm{dz.get<bf16>() + zoff, ldz, dw.get<float>(), eps};
  run(got.get<bf16>(), &nrm);
  const auto y_want = to_host<bf16>(want, no), y_got = to_host<bf16>(got, no);

  // Both forms share o bit for bit (the same products) and every element-wise step; only the fp32
  // sum of squares of a row is added in another order, so 1 / rms differs by a few fp32 ulps. That
  // moves n = bf16(o / rms) by at most one bf16 ulp where it sits next to a rounding boundary;
  // bf16(w n) and bf16(w n silu(z)) can each add one more: at most 3 bf16 ulps of y (4 allowed),
  // and only on the rare element near a boundary (about 1e-4 of them; 1 % allowed).
  size_t bad = 0, differ = 0, non_finite = 0;
  double worst = 0;
  for (size_t i = 0; i < no; ++i) {
    const float a = y_got[i], b = y_want[i];
    if (!std::isfinite(a) || !std::isfinite(b)) {
      ++non_finite;
      continue;
    }
    if (a == b) continue;
    ++differ;
    const float mag = std::max(std::fabs(a), std::fabs(b));
    const double ulp = std::ldexp(1.0, std::ilogb(mag) - 7);  // bf16: 8 significant bits
    const double d = std::fabs(double(a) - b) / ulp;
    worst = std::max(worst, d);
    if (d > 4.0) ++bad;
  }
  EXPECT_EQ(non_finite, 0u);
  EXPECT_EQ(bad, 0u) << "worst " << worst << " bf16 ulps";
  EXPECT_LE(differ, no / 100) << differ << " of " << no << " elements differ";
}

TEST(GdnGatedNorm, FusedMatchesOutputThenNorm) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  for (Shape sh : {Shape{16, 32, 128, 128, 8}, Shape{2, 6, 32, 48, 2}, Shape{2, 4, 16, 16, 8}}) {
    for (int T : {1, 63, 64, 65, 961}) {
      SCOPED_TRACE("T " + std::to_string(T) + " dk " + std::to_string(sh.dk) + " dv " +
                   std::to_string(sh.dv));
      expect_fused_matches(rng, sh, T, 1, nullptr);
    }
  }
}

TEST(GdnGatedNorm, FusedMatchesOutputThenNormPacked) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  std::vector<std::vector<int>> packs = {{1, 63, 64, 65}, {65, 1}, {300, 7, 129, 1, 700}};
  std::uniform_int_distribution<int> count(1, 12), len(1, 400);
  for (int i = 0; i < 2; ++i) {
    std::vector<int> p(count(rng));
    for (int& l : p) l = len(rng);
    packs.push_back(p);
  }
  for (Shape sh : {Shape{16, 32, 128, 128, 8}, Shape{2, 6, 32, 48, 2}}) {
    for (const auto& lengths : packs) {
      std::string d;
      for (int l : lengths) d += (d.empty() ? "" : ",") + std::to_string(l);
      SCOPED_TRACE("lengths " + d + " dv " + std::to_string(sh.dv));
      // bucket padding (3 rows, absorbed by the last sequence) and unused sequence slots
      const int T = std::accumulate(lengths.begin(), lengths.end(), 0) + 3;
      const int S = static_cast<int>(lengths.size()), slots = sequence_bucket(S) * 2;
      const DeviceTables dt(pack_tables(lengths, T, slots, 64));
      expect_fused_matches(rng, sh, T, slots, &dt.gdn);
    }
  }
}

// The epilogue exists only on the tensor-core path, and refuses operands it would misread.
TEST(GdnGatedNorm, RefusesWhereItDoesNotApply) {
  CLEF_REQUIRE_GPU();
  EXPECT_FALSE(gdn_fuses_gated_norm(128, 128, false, KernelPath::Auto));
  EXPECT_FALSE(gdn_fuses_gated_norm(128, 128, true, KernelPath::Generic));
  EXPECT_FALSE(gdn_fuses_gated_norm(36, 36, true, KernelPath::Auto));  // SIMT dims
  const int T = 4, H = 2, d = 16;
  DeviceBuffer in(size_t(T) * 2 * d * 4 * 4), z(size_t(T) * H * d * 2 + 16), w(d * 4 + 16),
      y(size_t(T) * H * d * 4), ws(gdn_workspace_bytes(T, H, d, d));
  // Inputs in the form each path takes (gdn.h GdnInputs), so that only the norm is refused.
  const float* f = in.get<float>();
  const auto* x = in.get<bf16>();
  auto inputs = [&](bool bf16_out, KernelPath path) {
    GdnInputs gi;
    if (gdn_takes_bf16_inputs(d, d, bf16_out, path))
      gi.xq = x, gi.xk = x, gi.xv = x, gi.rq = f, gi.rk = f;
    else
      gi.q = f, gi.k = f, gi.v = f;
    gi.g = f, gi.beta = f;
    return gi;
  };
  const GdnInputs simt32 = inputs(false, KernelPath::Auto),
                  simt = inputs(true, KernelPath::Generic), tc = inputs(true, KernelPath::Auto);
  const GdnGatedNorm ok{z.get<bf16>(), H * d, w.get<float>(), 1e-6f};
  EXPECT_THROW(gdn_chunked<float>(simt32, T, 1, H, d, d, y.get<float>(), ws.get(), KernelPath::Auto,
                                  0, nullptr, nullptr, nullptr, &ok),
               std::invalid_argument);
  EXPECT_THROW(gdn_chunked<bf16>(simt, T, 1, H, d, d, y.get<bf16>(), ws.get(), KernelPath::Generic,
                                 0, nullptr, nullptr, nullptr, &ok),
               std::invalid_argument);
  for (const GdnGatedNorm bad : {GdnGatedNorm{nullptr, H * d, w.get<float>(), 1e-6f},
                                 GdnGatedNorm{z.get<bf16>(), H * d + 1, w.get<float>(), 1e-6f},
                                 GdnGatedNorm{z.get<bf16>(), H * d - 2, w.get<float>(), 1e-6f},
                                 GdnGatedNorm{z.get<bf16>() + 1, H * d, w.get<float>(), 1e-6f},
                                 GdnGatedNorm{z.get<bf16>(), H * d, w.get<float>() + 1, 1e-6f}})
    EXPECT_THROW(gdn_chunked<bf16>(tc, T, 1, H, d, d, y.get<bf16>(), ws.get(), KernelPath::Auto, 0,
                                   nullptr, nullptr, nullptr, &bad),
                 std::invalid_argument);
  EXPECT_THROW(gdn_chunked<bf16>(tc, T, 1, H, d, d, y.get<bf16>() + 1, ws.get(), KernelPath::Auto,
                                 0, nullptr, nullptr, nullptr, &ok),
               std::invalid_argument);  // y stored as pairs
}

}  // namespace
}  // namespace clef

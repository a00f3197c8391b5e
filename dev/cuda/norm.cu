// Workbench: the norm family (engine/cuda/kernels/norm.h): rms_norm_1p (hidden rows, the input,
// post-attention and final norms) and gated_rms_norm (GDN output, per value head). Checks both
// variants against clef_engine_ref at small shapes, then times vec8 (KernelPath::Auto) and generic
// (KernelPath::Generic) at the Clef-flash shapes; bf16 storage like the production engine.
#include <cstdio>

#include "common.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/norm.h"
#include "support/ref/backbone_ref.h"

using namespace clef::engine::cuda;
using namespace clef::dev;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

namespace {

constexpr KernelPath kPaths[] = {KernelPath::Auto, KernelPath::Generic};
constexpr double kTol = 4e-3;  // bf16 outputs

bool check_rms_norm(std::mt19937_64& rng, int rows, int D, int ld) {
  auto xs = rand_e<bf16>(rng, size_t(rows) * ld, 3.0f);
  auto w = randn(rng, D, 0.3f);
  round_all_bf16(w);
  std::vector<float> x(size_t(rows) * D);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < D; ++i) x[size_t(r) * D + i] = xs[size_t(r) * ld + i];
  std::vector<float> want(x.size());
  ref::rms_norm_1p_ref(x.data(), w.data(), want.data(), rows, D, kEps, true);
  auto dx = to_device<bf16>(xs);
  auto dw = to_device<float>(w);
  bool ok = true;
  for (KernelPath path : kPaths) {
    auto out = poisoned<bf16>(size_t(rows) * ld);
    rms_norm_1p<bf16>(dx.get<bf16>(), ld, dw.get<float>(), out.get<bf16>(), ld, rows, D, kEps, path,
                      0);
    const auto got_ld = to_host<bf16>(out, size_t(rows) * ld);
    std::vector<float> got(x.size());
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < D; ++i) got[size_t(r) * D + i] = got_ld[size_t(r) * ld + i];
    ok &= check(rms_norm_1p_variant(ld, ld, D, path), "out", got, want, kTol);
  }
  return ok;
}

bool check_gated(std::mt19937_64& rng, int T, int H, int dv, int ldz) {
  auto o = rand_e<bf16>(rng, size_t(T) * H * dv, 0.2f);
  auto z = rand_e<bf16>(rng, size_t(T) * ldz, 2.0f);
  auto w = randn(rng, dv, 0.5f, 1.0f);
  round_all_bf16(w);
  std::vector<float> want(o.size());
  ref::gated_rms_norm_ref(o.data(), z.data(), ldz, w.data(), want.data(), T, H, dv, kEps, true);
  auto d_o = to_device<bf16>(o), dz = to_device<bf16>(z);
  auto dw = to_device<float>(w);
  bool ok = true;
  for (KernelPath path : kPaths) {
    auto y = poisoned<bf16>(o.size());
    gated_rms_norm<bf16>(d_o.get<bf16>(), dz.get<bf16>(), ldz, dw.get<float>(), y.get<bf16>(), T, H,
                         dv, kEps, path, 0);
    ok &= check(gated_rms_norm_variant(ldz, dv, path), "y", to_host<bf16>(y, o.size()), want, kTol);
  }
  return ok;
}

}  // namespace

int main() {
  print_device();
  auto rng = make_rng();
  const std::vector<int> tokens = bench_tokens();
  if (!checks_pass("norm", [&] {
        bool ok = true;
        ok &= check_rms_norm(rng, 37, kHidden, kHidden);  // flash width
        ok &= check_rms_norm(rng, 37, 300, 300);          // Auto falls back to generic
        ok &= check_gated(rng, 29, kGdnHv, kGdnD, kGdnLd);
        ok &= check_gated(rng, 29, 6, kGdnD, 6 * kGdnD + 41);  // odd z stride: generic under Auto
        return ok;
      }))
    return 1;

  const int Tmax = *std::max_element(tokens.begin(), tokens.end());
  auto x = to_device<bf16>(rand_e<bf16>(rng, size_t(Tmax) * kHidden, 3.0f));
  auto w = to_device<float>(randn(rng, kHidden, 0.3f));
  auto out = poisoned<bf16>(size_t(Tmax) * kHidden);
  auto o = to_device<bf16>(rand_e<bf16>(rng, size_t(Tmax) * kGdnHv * kGdnD, 0.2f));
  auto z = to_device<bf16>(rand_e<bf16>(rng, size_t(Tmax) * kGdnLd, 2.0f));
  auto gw = to_device<float>(randn(rng, kGdnD, 0.5f, 1.0f));
  auto y = poisoned<bf16>(size_t(Tmax) * kGdnHv * kGdnD);
  Timer timer;
  print_header(timer);
  for (int T : tokens) {
    for (KernelPath path : kPaths) {
      const double us = timer.median_us([&] {
        rms_norm_1p<bf16>(x.get<bf16>(), kHidden, w.get<float>(), out.get<bf16>(), kHidden, T,
                          kHidden, kEps, path, 0);
      });
      // x read + out written (bf16) + w (fp32).
      const double bytes = 2.0 * T * kHidden * sizeof(bf16) + kHidden * sizeof(float);
      print_row("norm", rms_norm_1p_variant(kHidden, kHidden, kHidden, path), T, us, bytes, kHbm);
    }
    for (KernelPath path : kPaths) {
      const double us = timer.median_us([&] {
        gated_rms_norm<bf16>(o.get<bf16>(), z.get<bf16>(), kGdnLd, gw.get<float>(), y.get<bf16>(),
                             T, kGdnHv, kGdnD, kEps, path, 0);
      });
      // o and z read, y written (bf16) + w.
      const double bytes = 3.0 * T * kGdnHv * kGdnD * sizeof(bf16) + kGdnD * sizeof(float);
      print_row("norm", gated_rms_norm_variant(kGdnLd, kGdnD, path), T, us, bytes, kHbm);
    }
  }
  return 0;
}

// Workbench: GDN input preparation (engine/cuda/kernels/gdn_prep.h): causal conv + SiLU over the
// qkv columns of the linear layer's fused projection, q/k L2 norms, beta and g. Checks both
// variants against clef_engine_ref, then times tile (KernelPath::Auto) and generic
// (KernelPath::Generic) at the Clef-flash shape; bf16 storage, each variant in both output forms:
// fp32 q, k, v (the SIMT GDN's inputs) and the bf16 form of gdn_conv_prep_bf16x (the tensor-core
// GDN's).
#include <cstdio>

#include "common.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/gdn_prep.h"
#include "support/ref/backbone_ref.h"

using namespace clef::engine::cuda;
using namespace clef::dev;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

namespace {

constexpr KernelPath kPaths[] = {KernelPath::Auto, KernelPath::Generic};
constexpr double kTol = 4e-3;

struct Inputs {
  GdnPrepArgs a;
  std::vector<float> proj, conv, A_log, dtb;
  Buf dp, dc, da, db;
};

// The linear layer's proj [T, ld] = [qkv | z | b | a] with `extra` unused columns.
Inputs make_inputs(std::mt19937_64& rng, int T, int Hk, int Hv, int dk, int dv, int extra) {
  Inputs in;
  const int cqkv = 2 * Hk * dk + Hv * dv;
  const int ld = cqkv + Hv * dv + 2 * Hv + extra;
  in.a = GdnPrepArgs{T, ld, Hk, Hv, dk, dv, kConvK, cqkv + Hv * dv, cqkv + Hv * dv + Hv};
  in.proj = rand_e<bf16>(rng, size_t(T) * ld, 1.0f);
  in.conv = rand_e<bf16>(rng, size_t(cqkv) * kConvK, 0.5f);
  in.A_log = randu(rng, Hv, 0.0f, 2.7f);
  in.dtb = randn(rng, Hv, 1.0f, 1.0f);
  round_all_bf16(in.A_log);
  round_all_bf16(in.dtb);
  in.dp = to_device<bf16>(in.proj);
  in.dc = to_device<bf16>(in.conv);
  in.da = to_device<float>(in.A_log);
  in.db = to_device<float>(in.dtb);
  return in;
}

// Both output forms: fp32 q, k, v (the SIMT GDN's inputs) and the bf16 form xq, xk, xv with the
// factors rq, rk (gdn_conv_prep_bf16x, the tensor-core GDN's); g and beta in each.
struct Outputs {
  Buf q, k, v, g, beta;
  Buf xq, xk, xv, rq, rk;
};
Outputs make_outputs(const GdnPrepArgs& a) {
  const size_t nq = size_t(a.T) * a.Hk * a.dk, nv = size_t(a.T) * a.Hv * a.dv,
               ng = size_t(a.T) * a.Hv, nr = size_t(a.T) * a.Hk;
  return {poisoned<float>(nq), poisoned<float>(nq), poisoned<float>(nv), poisoned<float>(ng),
          poisoned<float>(ng), poisoned<bf16>(nq),  poisoned<bf16>(nq),  poisoned<bf16>(nv),
          poisoned<float>(nr), poisoned<float>(nr)};
}

void run(const Inputs& in, const GdnPrepArgs& a, Outputs& out, KernelPath path) {
  gdn_conv_prep<bf16>(in.dp.get<bf16>(), in.dc.get<bf16>(), in.da.get<float>(), in.db.get<float>(),
                      a, out.q.get<float>(), out.k.get<float>(), out.v.get<float>(),
                      out.g.get<float>(), out.beta.get<float>(), path, 0);
}
void run_bf16x(const Inputs& in, const GdnPrepArgs& a, Outputs& out, KernelPath path) {
  gdn_conv_prep_bf16x(
      in.dp.get<bf16>(), in.dc.get<bf16>(), in.da.get<float>(), in.db.get<float>(), a,
      {out.xq.get<bf16>(), out.xk.get<bf16>(), out.xv.get<bf16>(), out.rq.get<float>(),
       out.rk.get<float>(), out.g.get<float>(), out.beta.get<float>()},
      path, 0);
}

// The factors of the xq / xk rows written (double), to compare rq / rk with.
std::vector<float> factors_of(const std::vector<float>& x, int d, double scale) {
  std::vector<float> r(x.size() / d);
  for (size_t h = 0; h < r.size(); ++h)
    r[h] = static_cast<float>(ref::gdn_l2_factor(&x[h * d], d, scale));
  return r;
}

bool check_shape(std::mt19937_64& rng, int T, int Hk, int Hv, int dk, int dv, int extra) {
  const Inputs in = make_inputs(rng, T, Hk, Hv, dk, dv, extra);
  const GdnPrepArgs& a = in.a;
  const int Cq = Hk * dk, Cv = Hv * dv, C = 2 * Cq + Cv;
  const size_t nq = size_t(T) * Cq, nv = size_t(T) * Cv, ng = size_t(T) * Hv;
  std::vector<float> rq(nq), rk(nq), rv(nv), rg(ng), rb(ng), s(size_t(T) * C);
  ref::gdn_conv_prep_ref(in.proj.data(), T, a.ld, Hk, Hv, dk, dv, kConvK, a.b_offset, a.a_offset,
                         in.conv.data(), in.A_log.data(), in.dtb.data(), true, rq.data(), rk.data(),
                         rv.data(), rg.data(), rb.data());
  // The bf16 form: the conv + SiLU values rounded to bf16, split into q, k, v.
  ref::gdn_conv_silu_ref(in.proj.data(), T, a.ld, C, kConvK, in.conv.data(), true, s.data());
  std::vector<float> xq(nq), xk(nq), xv(nv);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      const float y = ref::round_bf16(s[size_t(t) * C + c]);
      if (c < Cq)
        xq[size_t(t) * Cq + c] = y;
      else if (c < 2 * Cq)
        xk[size_t(t) * Cq + c - Cq] = y;
      else
        xv[size_t(t) * Cv + c - 2 * Cq] = y;
    }
  bool ok = true;
  for (KernelPath path : kPaths) {
    Outputs out = make_outputs(a);
    run(in, a, out, path);
    const std::string name = gdn_conv_prep_variant(a, path);
    ok &= check(name, "q", to_host<float>(out.q, nq), rq, kTol);
    ok &= check(name, "k", to_host<float>(out.k, nq), rk, kTol);
    ok &= check(name, "v", to_host<float>(out.v, nv), rv, kTol);
    ok &= check(name, "g", to_host<float>(out.g, ng), rg, 1e-5);
    ok &= check(name, "beta", to_host<float>(out.beta, ng), rb, kTol);
    run_bf16x(in, a, out, path);
    const std::string name_x = gdn_conv_prep_bf16x_variant(a, path);
    // Bit for bit but for rare near-ties (the device's expf vs the host's): 1e-3 is ~10x those.
    const auto hq = to_host<bf16>(out.xq, nq), hk = to_host<bf16>(out.xk, nq);
    ok &= check(name_x, "xq", hq, xq, 1e-3);
    ok &= check(name_x, "xk", hk, xk, 1e-3);
    ok &= check(name_x, "xv", to_host<bf16>(out.xv, nv), xv, 1e-3);
    ok &= check(name_x, "rq", to_host<float>(out.rq, size_t(T) * Hk),
                factors_of(hq, dk, 1.0 / std::sqrt(double(dk))), 2e-6);
    ok &=
        check(name_x, "rk", to_host<float>(out.rk, size_t(T) * Hk), factors_of(hk, dk, 1.0), 2e-6);
    ok &= check(name_x, "g", to_host<float>(out.g, ng), rg, 1e-5);
    ok &= check(name_x, "beta", to_host<float>(out.beta, ng), rb, kTol);
  }
  return ok;
}

}  // namespace

int main() {
  print_device();
  auto rng = make_rng();
  const std::vector<int> tokens = bench_tokens();
  if (!checks_pass("gdn_prep", [&] {
        bool ok = true;
        // Flash dims; the tile variant takes 4, 8 (the last block 3) and 16 tokens per block.
        ok &= check_shape(rng, 100, kGdnHk, kGdnHv, kGdnD, kGdnD, 0);
        ok &= check_shape(rng, 363, kGdnHk, kGdnHv, kGdnD, kGdnD, 0);
        ok &= check_shape(rng, 961, kGdnHk, kGdnHv, kGdnD, kGdnD, 0);
        ok &= check_shape(rng, 70, 2, 4, 16, 16, 3);  // odd ld: generic under Auto
        return ok;
      }))
    return 1;

  const int Tmax = *std::max_element(tokens.begin(), tokens.end());
  const Inputs in = make_inputs(rng, Tmax, kGdnHk, kGdnHv, kGdnD, kGdnD, 0);
  Outputs out = make_outputs(in.a);
  Timer timer;
  print_header(timer);
  // Auto and Generic, then the tile variant at each block size (GdnPrepArgs::tile_tokens, rows
  // named _n<tokens>; Auto picks 8 at 361 tokens and 16 from 657 on): a sweep for its heuristic.
  struct Config {
    KernelPath path;
    int tile_tokens;
  };
  const Config configs[] = {{KernelPath::Auto, 0},  {KernelPath::Generic, 0},
                            {KernelPath::Auto, 4},  {KernelPath::Auto, 8},
                            {KernelPath::Auto, 12}, {KernelPath::Auto, 16}};
  for (int T : tokens) {
    for (const Config& cf : configs) {
      GdnPrepArgs a = in.a;
      a.T = T;
      a.tile_tokens = cf.tile_tokens;
      const std::string sfx = cf.tile_tokens ? "_n" + std::to_string(cf.tile_tokens) : "";
      // Read: the qkv, b and a columns (bf16) and the taps; written: q, k, v, g, beta (fp32), or
      // in the bf16 form xq, xk, xv (bf16), rq, rk (fp32 per token and key head), g, beta. The
      // tile variant's halo re-reads (3 rows per block of 4..16 tokens, mostly L2 hits) are not
      // counted.
      const double read = double(T) * (kGdnCqkv + 2 * kGdnHv) * sizeof(bf16) +
                          double(kGdnCqkv) * kConvK * sizeof(bf16);
      const double us = timer.median_us([&] { run(in, a, out, cf.path); });
      print_row("gdn_prep", gdn_conv_prep_variant(a, cf.path) + sfx, T, us,
                read + double(T) * (kGdnCqkv + 2 * kGdnHv) * sizeof(float), kHbm);
      const double us_x = timer.median_us([&] { run_bf16x(in, a, out, cf.path); });
      print_row("gdn_prep", gdn_conv_prep_bf16x_variant(a, cf.path) + sfx, T, us_x,
                read + double(T) * (kGdnCqkv * sizeof(bf16) + (2 * kGdnHk + 2 * kGdnHv) * 4.0),
                kHbm);
    }
  }
  return 0;
}

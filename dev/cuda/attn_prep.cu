// Workbench: full-attention input preparation and output gate (engine/cuda/kernels/attn_prep.h):
// q/k RMSNorm1p per head + partial RoPE + v copy, and attn *= sigmoid(gate). Checks both variants
// against clef_engine_ref, then times vec8 (KernelPath::Auto) and generic (KernelPath::Generic) at
// the Clef-flash shape; bf16 storage like the production engine.
#include <cstdio>

#include "common.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/attn_prep.h"
#include "support/ref/backbone_ref.h"

using namespace clef::engine::cuda;
using namespace clef::dev;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

namespace {

constexpr KernelPath kPaths[] = {KernelPath::Auto, KernelPath::Generic};
constexpr double kTol = 4e-3;

bool check_shape(std::mt19937_64& rng, int T, int nh, int nkv, int hd, int rd, int extra) {
  const int ld = nh * 2 * hd + 2 * nkv * hd + extra;
  auto proj = rand_e<bf16>(rng, size_t(T) * ld, 1.5f);
  auto qw = randn(rng, hd, 0.3f), kw = randn(rng, hd, 0.3f);
  round_all_bf16(qw);
  round_all_bf16(kw);
  const auto inv = rope_inv_freq(rd, kRopeTheta);
  auto dp = to_device<bf16>(proj);
  auto dqw = to_device<float>(qw), dkw = to_device<float>(kw), dinv = to_device<float>(inv);
  const size_t nq = size_t(T) * nh * hd, nk = size_t(T) * nkv * hd;
  const AttnPrepArgs a{T, ld, nh, nkv, hd, rd, kEps, dinv.get<float>()};
  std::vector<float> rq(nq), rk(nk), rv(nk);
  ref::attn_prep_ref(proj.data(), T, ld, nh, nkv, hd, rd, kEps, inv.data(), qw.data(), kw.data(),
                     true, rq.data(), rk.data(), rv.data());
  const auto attn = rand_e<bf16>(rng, nq);
  std::vector<float> gated(attn);
  ref::attn_output_gate_ref(gated.data(), proj.data(), ld, T, nh, hd, true);
  bool ok = true;
  for (KernelPath path : kPaths) {
    auto q = poisoned<bf16>(nq), k = poisoned<bf16>(nk), v = poisoned<bf16>(nk);
    attn_prep<bf16>(dp.get<bf16>(), dqw.get<float>(), dkw.get<float>(), a, q.get<bf16>(),
                    k.get<bf16>(), v.get<bf16>(), path, 0);
    const std::string name = attn_prep_variant(a, path);
    ok &= check(name, "q", to_host<bf16>(q, nq), rq, kTol);
    ok &= check(name, "k", to_host<bf16>(k, nk), rk, kTol);
    ok &= check(name, "v", to_host<bf16>(v, nk), rv, 0.0);
    auto dattn = to_device<bf16>(attn);
    attn_output_gate<bf16>(dattn.get<bf16>(), dp.get<bf16>(), ld, T, nh, hd, path, 0);
    ok &= check(attn_output_gate_variant(ld, hd, path), "attn", to_host<bf16>(dattn, nq), gated,
                kTol);
  }
  return ok;
}

}  // namespace

int main() {
  print_device();
  auto rng = make_rng();
  const std::vector<int> tokens = bench_tokens();
  if (!checks_pass("attn_prep", [&] {
        bool ok = true;
        ok &= check_shape(rng, 50, kAttnNh, kAttnNkv, kAttnHd, kRotary, 0);  // flash dims
        ok &= check_shape(rng, 20, 2, 2, 24, 6, 3);  // rd / 2 not a multiple of 8, odd ld: generic
        return ok;
      }))
    return 1;

  const int Tmax = *std::max_element(tokens.begin(), tokens.end());
  const int nq_cols = kAttnNh * kAttnHd, nk_cols = kAttnNkv * kAttnHd;
  auto proj = to_device<bf16>(rand_e<bf16>(rng, size_t(Tmax) * kAttnLd, 1.5f));
  auto qw = to_device<float>(randn(rng, kAttnHd, 0.3f));
  auto kw = to_device<float>(randn(rng, kAttnHd, 0.3f));
  auto inv = to_device<float>(rope_inv_freq(kRotary, kRopeTheta));
  auto q = poisoned<bf16>(size_t(Tmax) * nq_cols);
  auto k = poisoned<bf16>(size_t(Tmax) * nk_cols), v = poisoned<bf16>(size_t(Tmax) * nk_cols);
  auto attn = to_device<bf16>(rand_e<bf16>(rng, size_t(Tmax) * nq_cols));
  Timer timer;
  print_header(timer);
  for (int T : tokens) {
    const AttnPrepArgs a{T, kAttnLd, kAttnNh, kAttnNkv, kAttnHd, kRotary, kEps, inv.get<float>()};
    for (KernelPath path : kPaths) {
      const double us = timer.median_us([&] {
        attn_prep<bf16>(proj.get<bf16>(), qw.get<float>(), kw.get<float>(), a, q.get<bf16>(),
                        k.get<bf16>(), v.get<bf16>(), path, 0);
      });
      // q, k, v columns of proj read and q, k, v written (bf16); the gates are not read.
      const double bytes = 2.0 * T * (nq_cols + 2 * nk_cols) * sizeof(bf16);
      print_row("attn_prep", attn_prep_variant(a, path), T, us, bytes, kHbm);
    }
    for (KernelPath path : kPaths) {
      // In place, so every run multiplies by the gate again: the values drift, the traffic does
      // not.
      const double us = timer.median_us([&] {
        attn_output_gate<bf16>(attn.get<bf16>(), proj.get<bf16>(), kAttnLd, T, kAttnNh, kAttnHd,
                               path, 0);
      });
      // attn and the gates read, attn written (bf16).
      const double bytes = 3.0 * T * nq_cols * sizeof(bf16);
      print_row("attn_prep", attn_output_gate_variant(kAttnLd, kAttnHd, path), T, us, bytes, kHbm);
    }
  }
  return 0;
}

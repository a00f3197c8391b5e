// Workbench: the causal GQA attention core (engine/cuda/attention/attention_core.h). Checks the
// bf16 flash kernel in both shapes (4 and 8 warps of 16 query rows per CTA) and the public entry
// point (its own pick, attention_core_bf16_pick_warps), plus the fp32 parity kernel, against
// clef_engine_ref's double-precision reference; then times each at the Clef-flash shape (16 q / 4
// kv heads, hd 256), causal FLOPs against the bf16 tensor peak (fp32 kernel: the fp32 SIMT peak).
#include <cstdio>
#include <string>

#include "common.h"
#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/tuning.h"
#include "support/ref/attention_ref.h"

using namespace clef::engine::cuda;
using namespace clef::dev;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

namespace {

// 0: attention_core_bf16 (its own pick); 4 or 8: that kernel shape; -1: attention_core_f32.
constexpr int kVariants[] = {4, 8, 0, -1};

std::string variant_name(int v, int T) {
  if (v < 0) return "attention_core_f32";
  if (v == 0)
    return "bf16 auto (" + std::to_string(attention_core_bf16_pick_warps(T, kAttnNh, kAttnHd)) +
           " warps)";
  return "bf16 " + std::to_string(v) + " warps";
}

void run(int v, const Buf& q, const Buf& k, const Buf& vv, Buf& out, int T, int nh, int nkv,
         int hd) {
  if (v < 0)
    attention_core_f32(q.get<float>(), k.get<float>(), vv.get<float>(), out.get<float>(), T, nh,
                       nkv, hd, nullptr);
  else if (v == 0)
    attention_core_bf16(q.get<bf16>(), k.get<bf16>(), vv.get<bf16>(), out.get<bf16>(), T, nh, nkv,
                        hd, nullptr);
  else
    attention_core_bf16_warps(v, q.get<bf16>(), k.get<bf16>(), vv.get<bf16>(), out.get<bf16>(), T,
                              nh, nkv, hd, nullptr);
}

struct Qkv {
  std::vector<float> q, k, v;
};
// q scaled up so that some softmax rows are peaked (exercises the running max); bf16-exact.
Qkv random_qkv(std::mt19937_64& rng, int T, int nh, int nkv, int hd) {
  std::uniform_real_distribution<float> qscale(0.5f, 3.f);
  Qkv x{rand_e<bf16>(rng, size_t(T) * nh * hd, qscale(rng)),
        rand_e<bf16>(rng, size_t(T) * nkv * hd), rand_e<bf16>(rng, size_t(T) * nkv * hd)};
  return x;
}

bool check_shape(std::mt19937_64& rng, int T, int nh, int nkv, int hd) {
  const Qkv x = random_qkv(rng, T, nh, nkv, hd);
  std::vector<double> want_d;
  ref::attention_ref(x.q, x.k, x.v, T, nh, nkv, hd, {}, want_d);
  const std::vector<float> want(want_d.begin(), want_d.end());
  bool ok = true;
  for (int v : kVariants) {
    const bool f32 = v < 0;
    Buf dq = f32 ? to_device<float>(x.q) : to_device<bf16>(x.q);
    Buf dk = f32 ? to_device<float>(x.k) : to_device<bf16>(x.k);
    Buf dv = f32 ? to_device<float>(x.v) : to_device<bf16>(x.v);
    Buf out = f32 ? poisoned<float>(x.q.size()) : poisoned<bf16>(x.q.size());
    run(v, dq, dk, dv, out, T, nh, nkv, hd);
    const auto got = f32 ? to_host<float>(out, x.q.size()) : to_host<bf16>(out, x.q.size());
    // bf16: output rounding alone is ~2^-9 relative, and P is rounded to bf16 for the PV product.
    ok &= check(variant_name(v, T), "out", got, want, f32 ? 1e-5 : 8e-3);
  }
  return ok;
}

}  // namespace

int main() {
  print_device();
  auto rng = make_rng();
  const std::vector<int> tokens = bench_tokens();
  if (!checks_pass("attention", [&] {
        bool ok = true;
        ok &= check_shape(rng, 300, kAttnNh, kAttnNkv, kAttnHd);  // flash heads, tiles + a tail
        ok &= check_shape(rng, 65, 8, 2, 32);                     // smallest head dim
        return ok;
      }))
    return 1;

  const int Tmax = *std::max_element(tokens.begin(), tokens.end());
  const Qkv x = random_qkv(rng, Tmax, kAttnNh, kAttnNkv, kAttnHd);
  const Buf q16 = to_device<bf16>(x.q), k16 = to_device<bf16>(x.k), v16 = to_device<bf16>(x.v);
  const Buf q32 = to_device<float>(x.q), k32 = to_device<float>(x.k), v32 = to_device<float>(x.v);
  Buf out = poisoned<float>(x.q.size());  // big enough for either type
  Timer timer;
  print_header(timer);
  for (int T : tokens) {
    // Causal FLOPs: QK^T and PV over the lower triangle (incl. diagonal), 2 FLOP per MAC.
    const double flop = 4.0 * kAttnNh * kAttnHd * (double(T) * (T + 1) / 2);
    for (int v : kVariants) {
      const bool f32 = v < 0;
      const double us = timer.median_us([&] {
        run(v, f32 ? q32 : q16, f32 ? k32 : k16, f32 ? v32 : v16, out, T, kAttnNh, kAttnNkv,
            kAttnHd);
      });
      print_row("attention", variant_name(v, T), T, us, flop, f32 ? kFp32Simt : kBf16Tensor);
    }
  }
  return 0;
}

// Workbench: the causal GQA attention core (engine/cuda/attention/attention_core.h). Checks the
// bf16 flash kernel in both shapes (4 and 8 warps of 16 query rows per CTA) and the public entry
// point (its own pick, attention_core_bf16_pick_warps), plus the fp32 parity kernel, against
// clef_engine_ref's double-precision reference; then times each at the Clef-flash shape (16 q / 4
// kv heads, hd 256), causal FLOPs against the bf16 tensor peak (fp32 kernel: the fp32 SIMT peak).
// Then the vision tower's mode (docs/spec/media.md §7): non-causal per segment, 16 heads of 72
// columns zero-padded to attention_padded_head_dim(72), scale 1/sqrt(72), segment_tiles tables;
// checked on a mixed packing against segment_attention_ref, timed on one 4096-row segment.
#include <cmath>
#include <cstdio>
#include <string>

#include "common.h"
#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/tuning.h"
#include "engine/cuda/packing.h"
#include "support/ref/attention_ref.h"

using namespace clef::engine::cuda;
using namespace clef::dev;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

namespace {

// 0: attention_core_bf16 (its own pick); 4 or 8: that kernel shape; -1: attention_core_f32.
constexpr int kVariants[] = {4, 8, 0, -1};

std::string variant_name(int v, int T, int nh = kAttnNh, int hd = kAttnHd) {
  if (v < 0) return "attention_core_f32";
  if (v == 0)
    return "bf16 auto (" + std::to_string(attention_core_bf16_pick_warps(T, nh, hd)) + " warps)";
  return "bf16 " + std::to_string(v) + " warps";
}

void run(int v, const Buf& q, const Buf& k, const Buf& vv, Buf& out, int T, int nh, int nkv, int hd,
         const AttnSequences* seqs = nullptr) {
  if (v < 0)
    attention_core_f32(q.get<float>(), k.get<float>(), vv.get<float>(), out.get<float>(), T, nh,
                       nkv, hd, nullptr, seqs);
  else if (v == 0)
    attention_core_bf16(q.get<bf16>(), k.get<bf16>(), vv.get<bf16>(), out.get<bf16>(), T, nh, nkv,
                        hd, nullptr, seqs);
  else
    attention_core_bf16_warps(v, q.get<bf16>(), k.get<bf16>(), vv.get<bf16>(), out.get<bf16>(), T,
                              nh, nkv, hd, nullptr, seqs);
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

// ---- the vision tower's mode ------------------------------------------------------------------
constexpr int kVisNh = 16, kVisHd = 72;

// [rows, heads, 72] -> [rows, heads, hdp], zeros in the padding columns (what the tower writes).
std::vector<float> pad_heads(const std::vector<float>& x, int hdp) {
  const size_t n = x.size() / kVisHd;
  std::vector<float> out(n * hdp, 0.f);
  for (size_t r = 0; r < n; ++r)
    std::copy(x.begin() + r * kVisHd, x.begin() + (r + 1) * kVisHd, out.begin() + r * hdp);
  return out;
}
std::vector<float> unpad_heads(const std::vector<float>& x, int hdp) {
  const size_t n = x.size() / hdp;
  std::vector<float> out(n * kVisHd);
  for (size_t r = 0; r < n; ++r)
    std::copy(x.begin() + r * hdp, x.begin() + r * hdp + kVisHd, out.begin() + r * kVisHd);
  return out;
}

// A segment table on the device, for the tile size of the variant that will run.
struct SegTable {
  Buf tiles;
  AttnSequences seqs;
};
SegTable seg_table(int v, const std::vector<int>& lengths, int T, int hdp) {
  const int rpt = v < 0    ? attention_rows_per_tile(false, T, kVisNh, hdp)
                  : v == 0 ? attention_rows_per_tile(true, T, kVisNh, hdp)
                           : 16 * v;
  const std::vector<int32_t> host = segment_tiles(lengths, rpt);
  SegTable t{Buf(host.size() * 4), {}};
  DEV_CUDA_CHECK(cudaMemcpy(t.tiles.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  t.seqs.tiles = t.tiles.get<int32_t>();
  t.seqs.tile_slots = static_cast<int>(host.size() / 4);
  t.seqs.causal = false;
  t.seqs.scale = 1.f / std::sqrt(static_cast<float>(kVisHd));
  return t;
}

bool check_segments(std::mt19937_64& rng, const std::vector<int>& lengths) {
  int T = 0;
  for (int l : lengths) T += l;
  const int hdp = attention_padded_head_dim(kVisHd);
  const Qkv x = random_qkv(rng, T, kVisNh, kVisNh, kVisHd);
  std::vector<double> want_d;
  ref::segment_attention_ref(x.q, x.k, x.v, lengths, kVisNh, kVisHd, 1.0 / std::sqrt(72.0), false,
                             {}, want_d);
  const std::vector<float> want(want_d.begin(), want_d.end());
  const auto qp = pad_heads(x.q, hdp), kp = pad_heads(x.k, hdp), vp = pad_heads(x.v, hdp);
  bool ok = true;
  for (int v : kVariants) {
    const bool f32 = v < 0;
    Buf dq = f32 ? to_device<float>(qp) : to_device<bf16>(qp);
    Buf dk = f32 ? to_device<float>(kp) : to_device<bf16>(kp);
    Buf dv = f32 ? to_device<float>(vp) : to_device<bf16>(vp);
    Buf out = f32 ? poisoned<float>(qp.size()) : poisoned<bf16>(qp.size());
    const SegTable t = seg_table(v, lengths, T, hdp);
    run(v, dq, dk, dv, out, T, kVisNh, kVisNh, hdp, &t.seqs);
    const auto got = f32 ? to_host<float>(out, qp.size()) : to_host<bf16>(out, qp.size());
    ok &= check(variant_name(v, T, kVisNh, hdp) + " non-causal", "out", unpad_heads(got, hdp), want,
                f32 ? 1e-5 : 8e-3);
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
        ok &= check_segments(rng, {17, 300, 3, 64, 65});          // the tower's mode
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

  // The tower: one 4096-row segment (a 1024 x 1024 image's patches), non-causal. FLOPs of the true
  // head dim (4 nh 72 T^2), so the padding to 80 columns shows as lost throughput.
  {
    const int T = 4096, hdp = attention_padded_head_dim(kVisHd);
    const Qkv xs = random_qkv(rng, T, kVisNh, kVisNh, kVisHd);
    const auto qp = pad_heads(xs.q, hdp), kp = pad_heads(xs.k, hdp), vp = pad_heads(xs.v, hdp);
    const Buf sq16 = to_device<bf16>(qp), sk16 = to_device<bf16>(kp), sv16 = to_device<bf16>(vp);
    const Buf sq32 = to_device<float>(qp), sk32 = to_device<float>(kp), sv32 = to_device<float>(vp);
    Buf sout = poisoned<float>(qp.size());  // big enough for either type
    const double flop = 4.0 * kVisNh * kVisHd * double(T) * T;
    for (int v : kVariants) {
      const bool f32 = v < 0;
      const SegTable t = seg_table(v, {T}, T, hdp);
      const double us = timer.median_us([&] {
        run(v, f32 ? sq32 : sq16, f32 ? sk32 : sk16, f32 ? sv32 : sv16, sout, T, kVisNh, kVisNh,
            hdp, &t.seqs);
      });
      print_row("attention", variant_name(v, T, kVisNh, hdp) + " non-causal 16x72", T, us, flop,
                f32 ? kFp32Simt : kBf16Tensor);
    }
  }
  return 0;
}

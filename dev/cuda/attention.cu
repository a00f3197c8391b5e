// Workbench: the GQA attention core (engine/cuda/attention/attention_core.h). Checks every bf16
// kernel variant (tuning.h: 4 or 8 warps of 1 or 2 m-tiles, 1 or 2 K/V stages, Q in shared memory
// or registers), the public entry point (its own pick, attention_core_bf16_pick) and the
// fp32 parity kernel against clef_engine_ref's double-precision reference; then times each at the
// Clef-flash shape (16 q / 4 kv heads, hd 256, causal; T 961, 2761, 5661, 16384, or CLEF_BENCH_T),
// causal FLOPs against mma.sync's dense bf16 peak (660 TFLOP/s on an H200; fp32 kernel: the fp32
// SIMT peak). Then the vision tower's mode (docs/spec/media.md §7): non-causal per segment, 16
// heads of 72 columns, run as the tower runs them (unpadded: attention_padded_head_dim(72) = 72)
// and zero-padded to 80 (as before v12b), scale 1/sqrt(72), segment_tiles tables; checked on a
// mixed packing against segment_attention_ref, timed on one 4096-row segment and on four of 1024,
// FLOPs counted at the model's 72 columns for both (the hd80 rows' padding is work the model does
// not need; their TFLOP/s x 80/72 is what perf-log v11 counted). CLEF_ATTN_VARIANT=w4s2,w8s2q
// (names from attention_variant_name) times those variants only (with the auto pick), read once
// here.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common.h"
#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/kv_tiles.h"
#include "engine/cuda/attention/tuning.h"
#include "engine/cuda/packing.h"
#include "support/ref/attention_ref.h"

using namespace clef::engine::cuda;
using namespace clef::dev;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

namespace {

// What one row runs: attention_core_bf16 (its own pick), one bf16 variant, or attention_core_f32.
struct Kernel {
  enum Kind { kAuto, kVariant, kF32 } kind = kAuto;
  AttnVariant var;
  bool f32() const { return kind == kF32; }
};

// Every variant, or those CLEF_ATTN_VARIANT names (comma-separated), between auto and f32.
std::vector<Kernel> kernels_to_run() {
  std::vector<Kernel> ks{{Kernel::kAuto, {}}};
  const char* env = std::getenv("CLEF_ATTN_VARIANT");
  if (env && *env) {
    std::stringstream ss(env);
    std::string name;
    while (std::getline(ss, name, ','))
      if (!name.empty()) ks.push_back({Kernel::kVariant, attention_variant_from_name(name)});
  } else {
    for (const AttnVariant& v : attention_bf16_variants()) ks.push_back({Kernel::kVariant, v});
  }
  ks.push_back({Kernel::kF32, {}});
  return ks;
}

bool runs(const Kernel& kr, int hd) {
  return kr.kind != Kernel::kVariant || attention_variant_supported(kr.var, hd);
}

std::string kernel_name(const Kernel& kr, int T, int nh = kAttnNh, int hd = kAttnHd) {
  if (kr.f32()) return "attention_core_f32";
  if (kr.kind == Kernel::kAuto)
    return "bf16 auto (" + attention_variant_name(attention_core_bf16_pick(T, nh, hd)) + ")";
  return "bf16 " + attention_variant_name(kr.var);
}

int kernel_rows_per_tile(const Kernel& kr, int T, int nh, int hd) {
  if (kr.kind == Kernel::kVariant) return attention_variant_rows_per_tile(kr.var);
  return attention_rows_per_tile(!kr.f32(), T, nh, hd);
}

// A key-tiled variant (wg64o4t) reads K and V in key tiles: tiled() makes them from the rows.
bool key_tiled(const Kernel& kr) {
  return kr.kind == Kernel::kVariant && kr.var.kv_tiled;
}
Buf tiled(const Buf& rows, int T, int nkv, int hd) {
  Buf t(kv_tiled_elems(T, nkv, hd) * sizeof(bf16));
  tile_kv_bf16(rows.get<bf16>(), t.get<bf16>(), T, nkv, hd, nullptr);
  return t;
}

// k and vv as the kernel reads them (key tiles for key_tiled).
void run(const Kernel& kr, const Buf& q, const Buf& k, const Buf& vv, Buf& out, int T, int nh,
         int nkv, int hd, const AttnSequences* seqs = nullptr) {
  if (kr.f32())
    attention_core_f32(q.get<float>(), k.get<float>(), vv.get<float>(), out.get<float>(), T, nh,
                       nkv, hd, nullptr, seqs);
  else if (kr.kind == Kernel::kAuto)
    attention_core_bf16(q.get<bf16>(), k.get<bf16>(), vv.get<bf16>(), out.get<bf16>(), T, nh, nkv,
                        hd, nullptr, seqs);
  else
    attention_core_bf16_variant(kr.var, q.get<bf16>(), k.get<bf16>(), vv.get<bf16>(),
                                out.get<bf16>(), T, nh, nkv, hd, nullptr, seqs);
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

bool check_shape(const std::vector<Kernel>& kernels, std::mt19937_64& rng, int T, int nh, int nkv,
                 int hd) {
  const Qkv x = random_qkv(rng, T, nh, nkv, hd);
  std::vector<double> want_d;
  ref::attention_ref(x.q, x.k, x.v, T, nh, nkv, hd, {}, want_d);
  const std::vector<float> want(want_d.begin(), want_d.end());
  bool ok = true;
  for (const Kernel& kr : kernels) {
    if (!runs(kr, hd)) continue;
    const bool f32 = kr.f32();
    Buf dq = f32 ? to_device<float>(x.q) : to_device<bf16>(x.q);
    Buf dk = f32 ? to_device<float>(x.k) : to_device<bf16>(x.k);
    Buf dv = f32 ? to_device<float>(x.v) : to_device<bf16>(x.v);
    if (key_tiled(kr)) dk = tiled(dk, T, nkv, hd), dv = tiled(dv, T, nkv, hd);
    Buf out = f32 ? poisoned<float>(x.q.size()) : poisoned<bf16>(x.q.size());
    run(kr, dq, dk, dv, out, T, nh, nkv, hd);
    const auto got = f32 ? to_host<float>(out, x.q.size()) : to_host<bf16>(out, x.q.size());
    // bf16: output rounding alone is ~2^-9 relative, and P is rounded to bf16 for the PV product.
    ok &= check(kernel_name(kr, T, nh, hd), "out", got, want, f32 ? 1e-5 : 8e-3);
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
SegTable seg_table(const Kernel& kr, const std::vector<int>& lengths, int T, int hdp) {
  const int rpt = kernel_rows_per_tile(kr, T, kVisNh, hdp);
  const std::vector<int32_t> host = segment_tiles(lengths, rpt);
  SegTable t{Buf(host.size() * 4), {}};
  DEV_CUDA_CHECK(cudaMemcpy(t.tiles.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  t.seqs.tiles = t.tiles.get<int32_t>();
  t.seqs.tile_slots = static_cast<int>(host.size() / 4);
  t.seqs.causal = false;
  t.seqs.scale = 1.f / std::sqrt(static_cast<float>(kVisHd));
  return t;
}

bool check_segments(const std::vector<Kernel>& kernels, std::mt19937_64& rng,
                    const std::vector<int>& lengths, int hdp) {
  int T = 0;
  for (int l : lengths) T += l;
  const Qkv x = random_qkv(rng, T, kVisNh, kVisNh, kVisHd);
  std::vector<double> want_d;
  ref::segment_attention_ref(x.q, x.k, x.v, lengths, kVisNh, kVisHd, 1.0 / std::sqrt(72.0), false,
                             {}, want_d);
  const std::vector<float> want(want_d.begin(), want_d.end());
  const auto qp = pad_heads(x.q, hdp), kp = pad_heads(x.k, hdp), vp = pad_heads(x.v, hdp);
  bool ok = true;
  for (const Kernel& kr : kernels) {
    if (!runs(kr, hdp)) continue;
    const bool f32 = kr.f32();
    Buf dq = f32 ? to_device<float>(qp) : to_device<bf16>(qp);
    Buf dk = f32 ? to_device<float>(kp) : to_device<bf16>(kp);
    Buf dv = f32 ? to_device<float>(vp) : to_device<bf16>(vp);
    if (key_tiled(kr)) dk = tiled(dk, T, kVisNh, hdp), dv = tiled(dv, T, kVisNh, hdp);
    Buf out = f32 ? poisoned<float>(qp.size()) : poisoned<bf16>(qp.size());
    const SegTable t = seg_table(kr, lengths, T, hdp);
    run(kr, dq, dk, dv, out, T, kVisNh, kVisNh, hdp, &t.seqs);
    const auto got = f32 ? to_host<float>(out, qp.size()) : to_host<bf16>(out, qp.size());
    ok &= check(kernel_name(kr, T, kVisNh, hdp) + " non-causal", "out", unpad_heads(got, hdp), want,
                f32 ? 1e-5 : 8e-3);
  }
  return ok;
}

}  // namespace

int main() {
  print_device();
  auto rng = make_rng();
  std::vector<Kernel> kernels;
  try {
    kernels = kernels_to_run();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "CLEF_ATTN_VARIANT: %s\n", e.what());
    return 2;
  }
  const std::vector<int> tokens =
      std::getenv("CLEF_BENCH_T") ? bench_tokens() : std::vector<int>{961, 2761, 5661, 16384};
  if (!checks_pass("attention", [&] {
        bool ok = true;
        ok &= check_shape(kernels, rng, 300, kAttnNh, kAttnNkv, kAttnHd);  // tiles + a tail
        ok &= check_shape(kernels, rng, 65, 8, 2, 32);                     // smallest head dim
        ok &= check_shape(kernels, rng, 200, 8, 2, 80);                    // the variants at 80
        ok &= check_shape(kernels, rng, 200, 8, 2, 72);                    // ... and at 72
        for (int hdp : {attention_padded_head_dim(kVisHd), 80})            // the tower's mode
          ok &= check_segments(kernels, rng, {17, 300, 3, 64, 65}, hdp);
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
    for (const Kernel& kr : kernels) {
      if (!runs(kr, kAttnHd)) continue;
      const bool f32 = kr.f32();
      if (f32 && T > 5661) continue;  // seconds per run: not what this table is for
      const double us = timer.median_us([&] {
        run(kr, f32 ? q32 : q16, f32 ? k32 : k16, f32 ? v32 : v16, out, T, kAttnNh, kAttnNkv,
            kAttnHd);
      });
      print_row("attention", kernel_name(kr, T), T, us, flop, f32 ? kFp32Simt : kMmaSync);
    }
  }

  // The tower: one 4096-row segment (a 1024 x 1024 image's patches) and four of 1024 (four 512 x
  // 512 images), non-causal, at 72 columns (the tower) and padded to 80. FLOPs of the model's head
  // dim (4 nh 72 sum len^2) in both.
  const int T = 4096;
  const Qkv xs = random_qkv(rng, T, kVisNh, kVisNh, kVisHd);
  for (int hdp : {attention_padded_head_dim(kVisHd), 80}) {
    const auto qp = pad_heads(xs.q, hdp), kp = pad_heads(xs.k, hdp), vp = pad_heads(xs.v, hdp);
    const Buf sq16 = to_device<bf16>(qp), sk16 = to_device<bf16>(kp), sv16 = to_device<bf16>(vp);
    const Buf sq32 = to_device<float>(qp), sk32 = to_device<float>(kp), sv32 = to_device<float>(vp);
    const Buf skt = tiled(sk16, T, kVisNh, hdp), svt = tiled(sv16, T, kVisNh, hdp);
    Buf sout = poisoned<float>(qp.size());  // big enough for either type
    for (const std::vector<int>& lengths : {std::vector<int>{4096}, std::vector<int>(4, 1024)}) {
      double flop = 0;
      for (int l : lengths) flop += 4.0 * kVisNh * kVisHd * double(l) * l;
      const std::string shape =
          " hd" + std::to_string(hdp) + (lengths.size() == 1 ? " nc 1x4096" : " nc 4x1024");
      for (const Kernel& kr : kernels) {
        if (!runs(kr, hdp)) continue;
        const bool f32 = kr.f32();
        const SegTable t = seg_table(kr, lengths, T, hdp);
        const double us = timer.median_us([&] {
          const bool kt = key_tiled(kr);
          run(kr, f32 ? sq32 : sq16,
              f32  ? sk32
              : kt ? skt
                   : sk16,
              f32  ? sv32
              : kt ? svt
                   : sv16,
              sout, T, kVisNh, kVisNh, hdp, &t.seqs);
        });
        print_row("attention", kernel_name(kr, T, kVisNh, hdp) + shape, T, us, flop,
                  f32 ? kFp32Simt : kMmaSync);
      }
    }
  }
  return 0;
}

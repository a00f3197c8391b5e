// Workbench: the chunked gated delta rule (engine/cuda/gdn/gdn.h). Checks the tensor-core path
// (bf16, KernelPath::Auto, where gdn::tc_supported) and the SIMT path (KernelPath::Generic, and
// the float32 parity engine) against the exact sequential recurrence of clef_engine_ref, then
// times each at the Clef-flash shape (Hk 16, Hv 32, dk = dv = 128), split into the parallel prep,
// the sequential scan and the rest (the tensor-core output kernel; nothing for SIMT).
// CLEF_BENCH_T=<T> CLEF_BENCH_SKIP_CHECK=1 (scripts/device/ncu_gdn.sh): one length, no checks,
// the tensor-core path first with 2 warm-up runs of 3 kernels each. Last, the tensor-core output
// kernel with the gated RMSNorm fused (gdn.h GdnGatedNorm) vs the output kernel + gated_rms_norm,
// and the scan that forms o itself (GdnOutputMode::InScan) + gated_rms_norm: the whole GDN core
// (prep to y) of each, and whether its y equals the output kernel's.
// CLEF_BENCH_PACK="1000x8;300x6+5000;5000+300x6" (packed batches as the engine runs them, '+'
// between sequences, LxN for N of L tokens): instead of the above, the whole core to y (the fused
// gated norm) and its prep / scan / output split per pack, the scan's sequences in slot order and
// longest first at two and at one CTA an SM (gdn/tensor_core.h TcLaunch longest_first,
// scan_blocks; the packed default is longest first at one); the four y must be equal.
#include <cstdio>
#include <string>
#include <type_traits>

#include "common.h"
#include "engine/cuda/gdn/core_choice.h"
#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/gdn/tensor_core.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/norm.h"
#include "engine/cuda/packing.h"
#include "support/ref/backbone_ref.h"

using namespace clef::engine::cuda;
using namespace clef::dev;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

namespace {

struct Variant {
  bool bf16;  // output storage: bf16 (production) or float (parity engine)
  KernelPath path;
  std::string name() const {
    return std::string(gdn_chunked_variant(kGdnD, kGdnD, bf16, path)) + (bf16 ? "" : " (fp32 out)");
  }
};
// Auto bf16 = production (tensor cores where supported), Generic bf16 = SIMT, float = parity.
constexpr Variant kVariants[] = {
    {true, KernelPath::Auto}, {true, KernelPath::Generic}, {false, KernelPath::Auto}};

// The inputs in both forms of gdn.h GdnInputs (the same q, k, v: random_inputs.h
// GdnFactoredRows), and on the host as the reference reads them.
struct Inputs {
  int T, Hk, Hv, dk, dv;
  std::vector<float> q, k, v, g, beta;
  Buf dq, dk_, dv_, dxq, dxk, dxv, drq, drk, dg, db, ws;
  // The form gdn_chunked takes for this output storage and path.
  GdnInputs form(bool bf16_out, KernelPath path) const {
    GdnInputs in;
    if (gdn_takes_bf16_inputs(dk, dv, bf16_out, path)) {
      in.xq = dxq.get<bf16>(), in.xk = dxk.get<bf16>(), in.xv = dxv.get<bf16>();
      in.rq = drq.get<float>(), in.rk = drk.get<float>();
    } else {
      in.q = dq.get<float>(), in.k = dk_.get<float>(), in.v = dv_.get<float>();
    }
    in.g = dg.get<float>(), in.beta = db.get<float>();
    return in;
  }
};
Inputs make_inputs(std::mt19937_64& rng, int T, int Hk, int Hv, int dk, int dv, float g_min) {
  Inputs in{T, Hk, Hv, dk, dv, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  const auto q = ref::gdn_factored_rows(rng, size_t(T) * Hk, dk, 1.0 / std::sqrt(double(dk)));
  const auto k = ref::gdn_factored_rows(rng, size_t(T) * Hk, dk, 1.0);
  in.q = q.q;
  in.k = k.q;
  in.v = rand_e<bf16>(rng, size_t(T) * Hv * dv);
  in.g = randu(rng, size_t(T) * Hv, g_min, 0.0f);
  in.beta = randu(rng, size_t(T) * Hv, 0.0f, 1.0f);
  in.dq = to_device<float>(in.q);
  in.dk_ = to_device<float>(in.k);
  in.dv_ = to_device<float>(in.v);
  in.dxq = to_device<bf16>(q.x);
  in.dxk = to_device<bf16>(k.x);
  in.dxv = to_device<bf16>(in.v);
  in.drq = to_device<float>(q.r);
  in.drk = to_device<float>(k.r);
  in.dg = to_device<float>(in.g);
  in.db = to_device<float>(in.beta);
  in.ws = Buf(gdn_workspace_bytes(T, Hv, dk, dv));
  return in;
}

template <typename E>
void run(const Inputs& in, int T, E* o, KernelPath path, cudaEvent_t between = nullptr,
         cudaEvent_t after_scan = nullptr) {
  gdn_chunked<E>(in.form(std::is_same_v<E, bf16>, path), T, in.Hk, in.Hv, in.dk, in.dv, o,
                 in.ws.get(), path, 0, between, after_scan);
}

bool check_shape(std::mt19937_64& rng, int T, int Hk, int Hv, int dk, int dv, float g_min) {
  const Inputs in = make_inputs(rng, T, Hk, Hv, dk, dv, g_min);
  const size_t no = size_t(T) * Hv * dv;
  std::vector<float> want(no);
  ref::gated_delta_rule_ref(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), T,
                            Hk, Hv, dk, dv, want.data());
  bool ok = true;
  for (const Variant& var : kVariants) {
    const std::string name = std::string(gdn_chunked_variant(dk, dv, var.bf16, var.path)) +
                             (var.bf16 ? "" : " (fp32 out)");
    if (var.bf16) {
      auto o = poisoned<bf16>(no);
      run<bf16>(in, T, o.get<bf16>(), var.path);
      ok &=
          check(name, "o", to_host<bf16>(o, no), want, 1e-2);  // split-bf16 products + bf16 output
    } else {
      auto o = poisoned<float>(no);
      run<float>(in, T, o.get<float>(), var.path);
      ok &= check(name, "o", to_host<float>(o, no), want, 2e-5);
    }
  }
  return ok;
}

// Nominal FLOPs of the chunked algorithm per (chunk of C, value head): K K^T and Q K^T (lower
// triangles, C^2 dk each), the triangular inverse (C^3 / 3), W = Tm K and U = Tm V (C^2 dk, C^2
// dv), W S and Q S (2 C dk dv each), P Vn (C^2 dv), the state update K^T Vn (2 C dk dv). The
// tensor-core path runs them on bf16 MMAs with fp32 operands split into two or three bf16 terms
// (2-3 products per nominal one; the inverse's block merge on 3xTF32), so its ceiling is about a
// third of mma.sync's bf16 peak.
double nominal_flops(int T, int Hv, int dk, int dv) {
  const double C = kGdnChunk, chunks = (T + kGdnChunk - 1) / kGdnChunk;
  const double per = C * C * (3.0 * dk + 2.0 * dv) + C * C * C / 3.0 + 6.0 * C * dk * dv;
  return per * chunks * Hv;
}

// text split at every `sep` (empty pieces kept)
std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t end; (end = text.find(sep, at)) != std::string::npos; at = end + 1)
    out.push_back(text.substr(at, end - at));
  out.push_back(text.substr(at));
  return out;
}

// "300x6+5000" -> {300 x 6, 5000}
std::vector<int> parse_pack(const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : split(text, '+')) {
    const size_t x = item.find('x');
    const int L = std::atoi(item.substr(0, x).c_str());
    const int n = x == std::string::npos ? 1 : std::atoi(item.substr(x + 1).c_str());
    for (int i = 0; i < n && L > 0; ++i) out.push_back(L);
  }
  return out;
}

// CLEF_BENCH_PACK: every pack's whole core (y with the fused norm) and split, in four forms.
int bench_packs(const char* spec, std::mt19937_64& rng) {
  std::vector<std::vector<int>> packs;
  for (const std::string& text : split(spec, ';'))
    if (auto p = parse_pack(text); !p.empty()) packs.push_back(std::move(p));
  if (!gdn::tc_supported(kGdnD, kGdnD)) {
    std::printf("[gdn pack] no tensor-core path here\n");
    return 1;
  }
  Timer timer;
  cudaEvent_t e[4];
  for (cudaEvent_t& x : e) DEV_CUDA_CHECK(cudaEventCreate(&x));
  for (const auto& lengths : packs) {
    int T = 0;
    for (int L : lengths) T += L;
    const int n = static_cast<int>(lengths.size()), slots = sequence_bucket(n);
    const PackTables t = pack_tables(lengths, T, slots, 64);
    auto ints = [](const std::vector<int32_t>& v) {
      Buf b(v.size() * sizeof(int32_t));
      DEV_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), b.bytes(), cudaMemcpyHostToDevice));
      return b;
    };
    const Buf row0 = ints(t.chunk_row0), valid = ints(t.chunk_valid), seq0 = ints(t.seq_chunk0);
    const GdnSequences seqs{row0.get<int32_t>(), valid.get<int32_t>(), seq0.get<int32_t>(),
                            t.chunk_slots, t.seq_slots};
    const Inputs in = make_inputs(rng, T, kGdnHk, kGdnHv, kGdnD, kGdnD, -2.0f);
    const Buf ws(gdn_workspace_bytes(T, kGdnHv, kGdnD, kGdnD, slots));
    const Buf z = to_device<bf16>(rand_e<bf16>(rng, size_t(T) * kGdnLd, 2.0f));
    const Buf w = to_device<float>(randn(rng, kGdnD, 0.5f, 1.0f));
    const GdnGatedNorm nrm{z.get<bf16>() + kGdnCqkv, kGdnLd, w.get<float>(), kEps};
    const size_t no = size_t(T) * kGdnHv * kGdnD;
    auto y = poisoned<bf16>(no);
    // {longest first, scan CTAs an SM, progress counts (TcLaunch::progress)}: the packed default
    // (1, 1, the process's choice) last, after the same without the counts
    constexpr int kForms = 5;
    const int configs[kForms][3] = {{0, 2, -1}, {1, 2, -1}, {0, 1, -1}, {1, 1, -1}, {1, 1, 0}};
    std::vector<float> y_of[kForms];
    std::string label;
    for (size_t i = 0; i < lengths.size(); ++i)
      label += (i ? "+" : "") + std::to_string(lengths[i]);
    for (int ci = 0; ci < kForms; ++ci) {
      const int longest = configs[ci][0], blocks = configs[ci][1], progress = configs[ci][2];
      const bool counts = progress == 1 || (progress == 0 && gdn_scan_progress());
      auto launch = [&](cudaEvent_t between, cudaEvent_t after) {
        gdn::chunked_tc(in.form(true, KernelPath::Auto), T, kGdnHk, kGdnHv, kGdnD, kGdnD,
                        y.get<bf16>(), ws.get<float>(), 0, between, after, &seqs, &nrm, false,
                        gdn::TcLaunch{-1, blocks, 0, longest, 0, 0, 0, 0, 0, progress});
      };
      DEV_CUDA_CHECK(cudaMemset(y.get(), 0xFF, no * sizeof(bf16)));  // each form writes all of y
      const double whole = timer.median_us([&] { launch(nullptr, nullptr); }, 2);
      y_of[ci] = to_host<bf16>(y, no);
      std::vector<float> part[3];
      for (int rep = 0; rep < 10; ++rep) {
        DEV_CUDA_CHECK(cudaEventRecord(e[0], 0));
        launch(e[1], e[2]);
        DEV_CUDA_CHECK(cudaEventRecord(e[3], 0));
        DEV_CUDA_CHECK(cudaEventSynchronize(e[3]));
        for (int k = 0; k < 3; ++k) {
          float ms = 0;
          DEV_CUDA_CHECK(cudaEventElapsedTime(&ms, e[k], e[k + 1]));
          part[k].push_back(1e3f * ms);
        }
      }
      for (auto& v : part) std::sort(v.begin(), v.end());
      std::printf(
          "[gdn pack] %-24s T %5d, %2d sequences (%2d slots), scan %s, %d CTA%s an SM, progress "
          "counts %s: whole core to y %.1f us (x24 %.2f ms); split (no counts): prep %.1f, scan "
          "%.1f, output + norm %.1f us\n",
          label.c_str(), T, n, slots, longest ? "longest first" : "in slot order", blocks,
          blocks > 1 ? "s" : "", counts ? "on" : "off", whole, 24e-3 * whole, part[0][5],
          part[1][5], part[2][5]);
    }
    size_t differ = 0;
    for (size_t i = 0; i < no; ++i) {
      bool d = false;
      for (int ci = 1; ci < kForms; ++ci) d |= y_of[0][i] != y_of[ci][i];
      differ += d;
    }
    // The per-pack choice's estimates (gdn/core_choice.h) beside this run's forms, to refit them.
    const std::vector<int> chunks = gdn_sequence_chunks(t.seq_chunk0);
    int sms = 0;
    DEV_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const GdnCoreCosts costs = gdn_core_costs();
    const double t3 = gdn_three_kernel_us(chunks, kGdnHv, sms, costs),
                 tf = gdn_fused_core_us(chunks, kGdnHv, sms, costs);
    std::printf("[gdn pack] %s: per-pack estimate three kernels %.1f us, fused %.1f us: %s\n",
                label.c_str(), t3, tf, tf < t3 ? "fused" : "three kernels");
    std::printf("[gdn pack] %s: y differs between the five forms in %zu of %zu values\n",
                label.c_str(), differ, no);
    if (differ) return 1;
  }
  for (cudaEvent_t x : e) cudaEventDestroy(x);
  return 0;
}

}  // namespace

int main() {
  print_device();
  std::printf("tensor-core GDN supported here: %s\n",
              gdn::tc_supported(kGdnD, kGdnD) ? "yes" : "no (Auto runs SIMT too)");
  auto rng = make_rng();
  if (const char* pack = std::getenv("CLEF_BENCH_PACK")) return bench_packs(pack, rng);
  const std::vector<int> tokens = bench_tokens();
  if (!checks_pass("gdn", [&] {
        bool ok = true;
        ok &= check_shape(rng, 200, kGdnHk, kGdnHv, kGdnD, kGdnD, -2.0f);  // flash dims, 4 chunks
        ok &= check_shape(rng, 130, 2, 6, 32, 48, -2.0f);                  // GQA 3, small heads
        ok &= check_shape(rng, 150, 2, 4, 64, 64, -40.0f);                 // strong decay
        return ok;
      }))
    return 1;

  const int Tmax = *std::max_element(tokens.begin(), tokens.end());
  const Inputs in = make_inputs(rng, Tmax, kGdnHk, kGdnHv, kGdnD, kGdnD, -2.0f);
  auto o = poisoned<float>(size_t(Tmax) * kGdnHv * kGdnD);  // big enough for either type
  cudaEvent_t e0, e1, e2, e3;
  for (cudaEvent_t* e : {&e0, &e1, &e2, &e3}) DEV_CUDA_CHECK(cudaEventCreate(e));
  Timer timer;
  print_header(timer);
  std::vector<std::string> splits;
  for (int T : tokens) {
    for (const Variant& var : kVariants) {
      auto launch = [&](cudaEvent_t between, cudaEvent_t after) {
        if (var.bf16)
          run<bf16>(in, T, o.get<bf16>(), var.path, between, after);
        else
          run<float>(in, T, o.get<float>(), var.path, between, after);
      };
      const double us = timer.median_us([&] { launch(nullptr, nullptr); }, 2);
      const bool tc =
          std::string(gdn_chunked_variant(kGdnD, kGdnD, var.bf16, var.path)) == "gdn_tensor_core";
      print_row("gdn", var.name(), T, us, nominal_flops(T, kGdnHv, kGdnD, kGdnD),
                tc ? kMmaSync : kFp32Simt);
      // The phase split, from events recorded inside gdn_chunked (median of 10).
      std::vector<float> prep, scan, rest;
      for (int rep = 0; rep < 10; ++rep) {
        DEV_CUDA_CHECK(cudaEventRecord(e0, 0));
        launch(e1, e2);
        DEV_CUDA_CHECK(cudaEventRecord(e3, 0));
        DEV_CUDA_CHECK(cudaEventSynchronize(e3));
        float a = 0, b = 0, c = 0;
        DEV_CUDA_CHECK(cudaEventElapsedTime(&a, e0, e1));
        DEV_CUDA_CHECK(cudaEventElapsedTime(&b, e1, e2));
        DEV_CUDA_CHECK(cudaEventElapsedTime(&c, e2, e3));
        prep.push_back(a), scan.push_back(b), rest.push_back(c);
      }
      auto med = [](std::vector<float>& x) {
        std::sort(x.begin(), x.end());
        return x[x.size() / 2];
      };
      const float mp = med(prep), ms = med(scan), mr = med(rest);
      char line[256];
      std::snprintf(line, sizeof line,
                    "[gdn split] %-28s T %5d: prep %.1f us, scan %.1f us (%.2f us per chunk "
                    "step), output %.1f us, x24 layers %.2f ms",
                    var.name().c_str(), T, 1e3 * mp, 1e3 * ms, 1e3 * ms / ((T + 63) / 64), 1e3 * mr,
                    24 * (mp + ms + mr));
      splits.push_back(line);
    }
  }
  // The gated RMSNorm (bf16, tensor-core path only): the output kernel then gated_rms_norm, vs the
  // norm fused into the output kernel (gdn.h GdnGatedNorm); both from after the scan to the end.
  if (gdn_fuses_gated_norm(kGdnD, kGdnD, true, KernelPath::Auto)) {
    const int ldz = kGdnLd;  // z as the engine reads it: a slice of the in_proj output row
    const Buf z = to_device<bf16>(rand_e<bf16>(rng, size_t(Tmax) * ldz, 2.0f));
    const Buf w = to_device<float>(randn(rng, kGdnD, 0.5f, 1.0f));
    auto y = poisoned<bf16>(size_t(Tmax) * kGdnHv * kGdnD);
    const bf16* zs = z.get<bf16>() + kGdnCqkv;
    const GdnGatedNorm nrm{zs, ldz, w.get<float>(), kEps};
    const bool in_scan = gdn::tc_scan_output_supported(kGdnD, kGdnD);
    for (int T : tokens) {
      const size_t no = size_t(T) * kGdnHv * kGdnD;
      // forms: 0 output kernel + gated_rms_norm, 1 the norm fused into the output kernel, 2 the
      // in-scan output + gated_rms_norm
      float tail[3] = {}, total[3] = {};
      std::vector<float> y_of[3];
      for (int form = 0; form < (in_scan ? 3 : 2); ++form) {
        auto launch = [&](cudaEvent_t between, cudaEvent_t after) {
          if (form == 1) {
            gdn_chunked<bf16>(in.form(true, KernelPath::Auto), T, in.Hk, in.Hv, in.dk, in.dv,
                              y.get<bf16>(), in.ws.get(), KernelPath::Auto, 0, between, after,
                              nullptr, &nrm, GdnOutputMode::Kernel);
          } else {
            gdn_chunked<bf16>(in.form(true, KernelPath::Auto), T, in.Hk, in.Hv, in.dk, in.dv,
                              o.get<bf16>(), in.ws.get(), KernelPath::Auto, 0, between, after,
                              nullptr, nullptr,
                              form == 2 ? GdnOutputMode::InScan : GdnOutputMode::Kernel);
            gated_rms_norm<bf16>(o.get<bf16>(), zs, ldz, w.get<float>(), y.get<bf16>(), T, kGdnHv,
                                 kGdnD, kEps, KernelPath::Auto, 0);
          }
        };
        std::vector<float> rest, all;
        for (int rep = 0; rep < 2 + 10; ++rep) {  // 2 warm-up runs
          DEV_CUDA_CHECK(cudaEventRecord(e0, 0));
          launch(e1, e2);
          DEV_CUDA_CHECK(cudaEventRecord(e3, 0));
          DEV_CUDA_CHECK(cudaEventSynchronize(e3));
          float c = 0, a = 0;
          DEV_CUDA_CHECK(cudaEventElapsedTime(&c, e2, e3));
          DEV_CUDA_CHECK(cudaEventElapsedTime(&a, e0, e3));
          if (rep >= 2) rest.push_back(c), all.push_back(a);
        }
        std::sort(rest.begin(), rest.end());
        std::sort(all.begin(), all.end());
        tail[form] = 1e3f * rest[rest.size() / 2];
        total[form] = 1e3f * all[all.size() / 2];
        y_of[form] = to_host<bf16>(y, no);
      }
      auto differ = [&](int a, int b) {
        size_t n = 0;
        for (size_t i = 0; i < no; ++i) n += y_of[a][i] != y_of[b][i];
        return n;
      };
      char line[320];
      std::snprintf(line, sizeof line,
                    "[gdn gated norm] T %5d: output + gated_rms_norm %.1f us, fused %.1f us "
                    "(%+.1f us, x24 %+.3f ms); %zu of %zu y values differ",
                    T, tail[0], tail[1], tail[1] - tail[0], 24e-3 * (tail[1] - tail[0]),
                    differ(1, 0), no);
      splits.push_back(line);
      if (in_scan) {
        std::snprintf(line, sizeof line,
                      "[gdn in-scan output] T %5d: whole core to y: output kernel + norm %.1f us, "
                      "fused norm %.1f us, in-scan + norm %.1f us (%+.1f us vs fused, x24 %+.3f "
                      "ms); y differs from the output kernel's in %zu of %zu",
                      T, total[0], total[1], total[2], total[2] - total[1],
                      24e-3 * (total[2] - total[1]), differ(2, 0), no);
        splits.push_back(line);
      }
    }
  }
  std::printf("\n");
  for (const auto& s : splits) std::printf("%s\n", s.c_str());
#ifdef CLEF_GDN_PHASE_CLOCKS
  // Diagnostic build: mean cycles per phase of the tensor-core kernels over every run above.
  const auto pc = gdn::phase_cycles();
  std::printf(
      "[gdn phases] prep (cycles/block): load %.0f gamma %.0f kkt %.0f diag %.0f offdiag+scale "
      "%.0f W %.0f U %.0f | output: load %.0f P %.0f Qsplit %.0f QS %.0f PVn %.0f\n",
      pc[0], pc[1], pc[2], pc[3], pc[4], pc[5], pc[6], pc[8], pc[9], pc[10], pc[11], pc[12]);
  std::printf(
      "[gdn phases] scan (cycles per chunk step): value: next-loads %.0f waitTop %.0f "
      "half1 %.0f waitBottom %.0f half2 %.0f Vn-to-shared %.0f arrive+Vn-to-global %.0f | state: "
      "tail %.0f waitVn %.0f upd0 %.0f pub0 %.0f upd1 %.0f\n",
      pc[16], pc[17], pc[18], pc[19], pc[20], pc[21], pc[22], pc[23], pc[24], pc[25], pc[26],
      pc[27]);
#endif
  for (cudaEvent_t e : {e0, e1, e2, e3}) cudaEventDestroy(e);
  return 0;
}

// Times the chunked-GDN kernels separately (parallel prep, sequential scan, parallel output) at the
// Clef-flash shape (Hk 16, Hv 32, dk = dv = 128) for the profile's lengths, bf16 and float32
// engines, and checks the output is written and finite. CLEF_GDN_TIMING_T=<T> times one length
// only (for a profiler run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "engine/cuda/gdn_chunked.h"
#include "engine/cuda/gdn_tc.h"
#include "gpu/gpu_test_util.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using namespace clef::gputest;

template <typename E>
void time_shape(int T, std::mt19937_64& rng) {
  const int Hk = 16, Hv = 32, dk = 128, dv = 128;
  auto unit = [&](int heads, int d, float scale) {
    auto x = randn(rng, size_t(T) * heads * d);
    for (size_t r = 0; r < x.size() / d; ++r) {
      double ss = 0;
      for (int i = 0; i < d; ++i) ss += double(x[r * d + i]) * x[r * d + i];
      for (int i = 0; i < d; ++i) x[r * d + i] = float(x[r * d + i] / std::sqrt(ss) * scale);
    }
    return x;
  };
  auto dq = to_device<float>(unit(Hk, dk, 1.0f / std::sqrt(float(dk))));
  auto dkk = to_device<float>(unit(Hk, dk, 1.0f));
  auto dv_ = to_device<float>(randn(rng, size_t(T) * Hv * dv));
  auto dg = to_device<float>(randu(rng, size_t(T) * Hv, -2.0f, 0.0f));
  auto db = to_device<float>(randu(rng, size_t(T) * Hv, 0.0f, 1.0f));
  DeviceBuffer ws(gdn_workspace_bytes(T, Hv, dk, dv));
  const size_t no = size_t(T) * Hv * dv;
  auto o = poisoned<E>(no);
  cudaEvent_t e0, e1, e2, e3;
  CLEF_CUDA_CHECK(cudaEventCreate(&e0));
  CLEF_CUDA_CHECK(cudaEventCreate(&e1));
  CLEF_CUDA_CHECK(cudaEventCreate(&e2));
  CLEF_CUDA_CHECK(cudaEventCreate(&e3));
  std::vector<float> prep, scan, rest;
  for (int rep = 0; rep < 12; ++rep) {
    CLEF_CUDA_CHECK(cudaEventRecord(e0, 0));
    gdn_chunked<E>(dq.template get<float>(), dkk.template get<float>(), dv_.template get<float>(),
                   dg.template get<float>(), db.template get<float>(), T, Hk, Hv, dk, dv,
                   o.template get<E>(), ws.get(), 0, e1, e2);
    CLEF_CUDA_CHECK(cudaEventRecord(e3, 0));
    CLEF_CUDA_CHECK(cudaEventSynchronize(e3));
    float a = 0, b = 0, c = 0;
    CLEF_CUDA_CHECK(cudaEventElapsedTime(&a, e0, e1));
    CLEF_CUDA_CHECK(cudaEventElapsedTime(&b, e1, e2));
    CLEF_CUDA_CHECK(cudaEventElapsedTime(&c, e2, e3));
    if (rep >= 2) prep.push_back(a), scan.push_back(b), rest.push_back(c);  // 2 warm-up runs
  }
  auto med = [](std::vector<float>& x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  const float mp = med(prep), ms = med(scan), mr = med(rest);
  const int chunks = (T + 63) / 64;
  std::printf(
      "[gdn timing] %s T %5d: prep %.1f us, scan %.1f us (%.2f us per chunk step), output %.1f "
      "us, x24 layers %.2f ms\n",
      std::is_same_v<E, float> ? "fp32" : "bf16", T, 1e3 * mp, 1e3 * ms, 1e3 * ms / chunks,
      1e3 * mr, 24 * (mp + ms + mr));
#ifdef CLEF_GDN_PHASE_CLOCKS
  if constexpr (!std::is_same_v<E, float>) {
    const auto pc = gdn::phase_cycles();  // over all 12 repetitions
    std::printf(
        "[gdn phases] T %5d prep (cycles/block): load %.0f gamma %.0f kkt %.0f diag %.0f "
        "offdiag+scale %.0f W %.0f U %.0f | output: load %.0f P %.0f Qsplit %.0f QS %.0f "
        "PVn %.0f\n",
        T, pc[0], pc[1], pc[2], pc[3], pc[4], pc[5], pc[6], pc[8], pc[9], pc[10], pc[11], pc[12]);
    std::printf(
        "[gdn phases] T %5d scan (cycles per chunk step): value: tail %.0f waitTop %.0f "
        "half1 %.0f waitBottom %.0f half2 %.0f | state: tail %.0f waitVn %.0f upd0 %.0f "
        "pub0 %.0f upd1 %.0f\n",
        T, pc[16], pc[17], pc[18], pc[19], pc[20], pc[21], pc[22], pc[23], pc[24], pc[25]);
  }
#endif
  const auto out = to_host<E>(o, no);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  cudaEventDestroy(e3);
}

TEST(GdnTiming, FlashShapeSplitsPrepAndScan) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  std::vector<int> lengths = {361, 961, 2761, 5661};
  if (const char* only = std::getenv("CLEF_GDN_TIMING_T")) lengths = {std::atoi(only)};
  for (int T : lengths) {
    time_shape<__nv_bfloat16>(T, rng);
    time_shape<float>(T, rng);
  }
}

}  // namespace
}  // namespace clef

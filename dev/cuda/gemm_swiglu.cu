// workbench_gemm_swiglu: the MLP's gate_up GEMM with SwiGLU in its epilogue (the engine's
// gemm/swiglu_gemm.h: TMA + wgmma, sm_90a) against what runs without it: the fastest of
// cuBLASLt's first 8 heuristic answers for gate_up [M, 2I] = x [M, K] W^T, then swiglu_vec8. The
// fused kernel never writes gate_up's [M, 2I] bf16 (344 MB at 7k rows) nor reads it back.
// Usage: CLEF_BENCH_MS=384,1024,7040 workbench_gemm_swiglu (the default M list). Checks first (the
// fused output against cuBLASLt + swiglu everywhere, and against a double-precision host reference
// on sampled rows), then times. First run: perf-log v29f.
#include <cublasLt.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common.h"
#include "engine/cuda/gemm/swiglu_gemm.h"
#include "engine/cuda/kernels/elementwise.h"
#include "lt_problem.h"

namespace clef::dev {
namespace {

using bf16 = __nv_bfloat16;

// ---- host
// ---------------------------------------------------------------------------------------- cuBLASLt
// gate_up [M, 2I] = x W^T (the engine's column-major form: C^T = W x^T), the fastest of the
// heuristic's first 8 answers at this M.
struct LtGemm {
  cublasLtHandle_t lt{};
  LtProblem p;
  cublasLtMatmulAlgo_t algo{};
  Buf ws{size_t(64) << 20};
  float one = 1.0f, zero = 0.0f;
  LtGemm(int M, int N, int K) : p(M, N, K, N) { LT_CHECK(cublasLtCreate(&lt)); }
  ~LtGemm() { cublasLtDestroy(lt); }
  void run(const bf16* w, const bf16* x, bf16* gu, const cublasLtMatmulAlgo_t& al) {
    LT_CHECK(cublasLtMatmul(lt, p.op, &one, w, p.a, x, p.b, &zero, gu, p.c, gu, p.c, &al, ws.get(),
                            ws.bytes(), 0));
  }
  // Picks `algo`; returns its median µs.
  double pick(Timer& timer, const bf16* w, const bf16* x, bf16* gu) {
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t bytes = ws.bytes();
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &bytes, sizeof bytes));
    cublasLtMatmulHeuristicResult_t res[8];
    int n = 0;
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, 8, res, &n));
    cublasLtMatmulPreferenceDestroy(pref);
    double best = 1e30;
    for (int i = 0; i < n; ++i) {
      const double us = timer.median_us([&] { run(w, x, gu, res[i].algo); }, 2, 7);
      if (us < best) best = us, algo = res[i].algo;
    }
    return best;
  }
};

float silu_host(float g) {
  return g / (1.0f + std::exp(-g));
}

std::vector<int> bench_ms() {
  std::vector<int> ms;
  const char* e = std::getenv("CLEF_BENCH_MS");
  std::string s = e ? e : "384,1024,7040";
  size_t p = 0;
  while (p < s.size()) {
    const size_t q = s.find(',', p);
    ms.push_back(std::atoi(s.substr(p, q - p).c_str()));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return ms;
}

}  // namespace
}  // namespace clef::dev

int main() {
  using namespace clef::dev;
  print_device();
  auto rng = make_rng();
  const int K = kHidden, I = kInter;
  const std::vector<int> ms = bench_ms();
  const int Mmax = *std::max_element(ms.begin(), ms.end());
  // x ~ N(0, 1) (a normed hidden row), W ~ N(0, 1/sqrt(K)): gate/up values of order 1.
  const std::vector<float> hw = rand_e<bf16>(rng, size_t(2) * I * K, 1.0f / 64.0f);
  const std::vector<float> hx = rand_e<bf16>(rng, size_t(Mmax) * K);
  Buf w = to_device<bf16>(hw), x = to_device<bf16>(hx), wg = to_device<bf16>(hw);
  {
    Buf scratch(size_t(2) * I * K * 2);
    clef::engine::cuda::regroup_gate_up(wg.get<bf16>(), scratch.get<bf16>(), I, K);
  }
  Buf gu(size_t(Mmax) * 2 * I * 2), ref(size_t(Mmax) * I * 2), out(size_t(Mmax) * I * 2);
  Timer timer;
  bool ok = true;
  struct Row {
    int M;
    double lt, sw, fused;
  };
  std::vector<Row> rows;
  for (int M : ms) {
    LtGemm lt(M, 2 * I, K);
    const double lt_us = lt.pick(timer, w.get<bf16>(), x.get<bf16>(), gu.get<bf16>());
    auto unfused = [&] {
      lt.run(w.get<bf16>(), x.get<bf16>(), gu.get<bf16>(), lt.algo);
      clef::engine::cuda::swiglu<bf16>(gu.get<bf16>(), ref.get<bf16>(), M, I,
                                       clef::engine::cuda::KernelPath::Auto, 0);
    };
    unfused();
    DEV_CUDA_CHECK(cudaMemset(out.get(), 0xFF, size_t(M) * I * 2));
    clef::engine::cuda::swiglu_gemm(x.get<bf16>(), wg.get<bf16>(), out.get<bf16>(), M, K, I, 0);
    DEV_CUDA_CHECK(cudaGetLastError());
    if (!skip_check()) {
      const std::vector<float> got = to_host<bf16>(out, size_t(M) * I);
      const std::vector<float> want = to_host<bf16>(ref, size_t(M) * I);
      size_t equal = 0;
      for (size_t i = 0; i < got.size(); ++i) equal += got[i] == want[i];
      std::printf("M %d: fused vs cuBLASLt + swiglu: %zu of %zu equal (%.2f %%)\n", M, equal,
                  got.size(), 100.0 * equal / got.size());
      ok &= check("M " + std::to_string(M) + " vs unfused", "out", got, want, 1e-2);
      // Host reference in double on sampled rows (first, last, the last row tile, random).
      std::vector<int> sample = {0, M - 1, std::max(0, M - 128 + 7), M / 2};
      std::vector<float> g2, r2;
      for (int m : sample) {
        for (int f = 0; f < I; ++f) {
          double sg = 0, su = 0;
          const float* xr = &hx[size_t(m) * K];
          const float* wgr = &hw[size_t(f) * K];
          const float* wur = &hw[size_t(I + f) * K];
          for (int k = 0; k < K; ++k) sg += double(xr[k]) * wgr[k], su += double(xr[k]) * wur[k];
          const float g = clef::engine::ref::round_bf16(float(sg));
          const float u = clef::engine::ref::round_bf16(float(su));
          r2.push_back(
              clef::engine::ref::round_bf16(clef::engine::ref::round_bf16(silu_host(g)) * u));
          g2.push_back(got[size_t(m) * I + f]);
        }
      }
      ok &= check("M " + std::to_string(M) + " vs host", "out", g2, r2, 1e-2);
      if (!ok) break;
    }
    const double sw_us = timer.median_us([&] {
      clef::engine::cuda::swiglu<bf16>(gu.get<bf16>(), ref.get<bf16>(), M, I,
                                       clef::engine::cuda::KernelPath::Auto, 0);
    });
    const double f_us = timer.median_us([&] {
      clef::engine::cuda::swiglu_gemm(x.get<bf16>(), wg.get<bf16>(), out.get<bf16>(), M, K, I, 0);
    });
    rows.push_back({M, lt_us, sw_us, f_us});
  }
  if (!ok) {
    std::printf("gemm_swiglu: MISMATCH, nothing timed\n");
    return 1;
  }
  print_header(timer);
  for (const Row& r : rows) {
    const double flops = 2.0 * r.M * 2.0 * I * K;
    print_row("gemm_swiglu", "cublaslt gate_up (best of 8)", r.M, r.lt, flops, kBf16Tensor);
    print_row("gemm_swiglu", "swiglu_vec8", r.M, r.sw, double(r.M) * 3 * I * 2, kHbm);
    print_row("gemm_swiglu", "fused (tma wgmma)", r.M, r.fused, flops, kBf16Tensor);
    std::printf("M %d: unfused %.1f us, fused %.1f us (%.3f of unfused; GEMM alone %.3f)\n", r.M,
                r.lt + r.sw, r.fused, r.fused / (r.lt + r.sw), r.fused / r.lt);
  }
  return 0;
}

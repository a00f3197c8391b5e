// workbench_gemm: is a bf16 GEMM row's result independent of the rows beside it (batch
// invariance, issue 14)? For each Clef-flash backbone GEMM shape, the same 256 "request" rows are
// placed inside problems of several M (at another row offset each, the other rows random), and
// every cuBLASLt algorithm the heuristic offers at any of those M is run at every M where it
// applies. Each run's request rows are hashed bit for bit on the device; equal hashes are one
// class (a letter). A column that keeps one letter is an algorithm whose rows do not depend on M
// or on where they sit; the row's '*' marks the algorithm the engine's timed tuning would pick at
// that M (fastest of the heuristic's first 12). Times are the median of 5 runs (µs).
// Environment: CLEF_BENCH_MS="384,1024,..." the M values; CLEF_SEED the inputs.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common.h"
#include "lt_problem.h"

namespace {

constexpr int kRequestRows = 256;
constexpr int kCandidates = 32;  // asked of the heuristic at each M
constexpr int kTimedPick = 12;   // the engine's timed tuning looks at the first 12
constexpr size_t kWorkspace = 64ull << 20;

// Order-independent 64-bit hash of the request rows (each element's bits mixed with its index,
// summed with wrap-around): equal for bit-identical rows, different otherwise in practice.
__global__ void hash_rows(const __nv_bfloat16* c, int ldc, int n, int rows,
                          unsigned long long* out) {
  unsigned long long h = 0;
  const int64_t total = int64_t(rows) * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, col = i % n;
    uint16_t bits;
    std::memcpy(&bits, &c[r * ldc + col], 2);
    unsigned long long x =
        (static_cast<unsigned long long>(bits) << 40) ^ (i * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    h += x;
  }
  atomicAdd(out, h);
}

struct Shape {
  const char* name;
  int n, k;
  bool accumulate;  // the residual GEMMs add into the stream (beta = 1)
};

std::string config_name(const cublasLtMatmulAlgo_t& a) {
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
    size_t size = 0;  // asked first: each attribute has its own width (16 or 32 bits)
    if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, nullptr, 0, &size) !=
            CUBLAS_STATUS_SUCCESS ||
        size == 0 || size > 8)
      return -1ll;
    uint64_t v = 0;  // little-endian: the low bytes hold the value
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, size, &written) != CUBLAS_STATUS_SUCCESS)
      return -1ll;
    return static_cast<long long>(v);
  };
  char buf[160];
  std::snprintf(buf, sizeof buf, "id%lld t%lld s%lld k%lld r%lld w%lld c%lld i%lld cl%lld",
                get(CUBLASLT_ALGO_CONFIG_ID), get(CUBLASLT_ALGO_CONFIG_TILE_ID),
                get(CUBLASLT_ALGO_CONFIG_STAGES_ID), get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                get(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION), get(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
                get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
  return buf;
}

std::vector<int> ms_from_env() {
  std::vector<int> ms = {384, 1024, 2048, 4096, 7168, 12288};
  if (const char* e = std::getenv("CLEF_BENCH_MS")) {
    ms.clear();
    for (const char* p = e; *p;) {
      ms.push_back(std::atoi(p));
      while (*p && *p != ',') ++p;
      if (*p == ',') ++p;
    }
  }
  return ms;
}

void fill(__nv_bfloat16* d, size_t n, float scale, std::mt19937_64& rng) {
  std::normal_distribution<float> g(0.f, scale);
  std::vector<__nv_bfloat16> h(n);
  for (auto& x : h) x = __float2bfloat16(g(rng));
  DEV_CUDA_CHECK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice));
}

}  // namespace

int main() {
  using namespace clef::dev;
  auto rng = make_rng();
  cudaDeviceProp prop{};
  DEV_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, cublasLt %zu\n", prop.name, cublasLtGetVersion());
  const std::vector<int> ms = ms_from_env();
  const int m_max = *std::max_element(ms.begin(), ms.end());
  const Shape shapes[] = {{"gdn in_proj", kGdnCqkv + kGdnHv * kGdnD, kHidden, false},
                          {"attn in_proj", kAttnLd, kHidden, false},
                          {"out_proj", kHidden, kHidden, true},
                          {"gate_up", 2 * kInter, kHidden, false},
                          {"down", kHidden, kInter, true},
                          {"gdn ba", 2 * kGdnHv, kHidden, false}};
  cublasLtHandle_t lt;
  LT_CHECK(cublasLtCreate(&lt));
  void* workspace = nullptr;
  DEV_CUDA_CHECK(cudaMalloc(&workspace, kWorkspace));
  unsigned long long* d_hash = nullptr;
  DEV_CUDA_CHECK(cudaMalloc(&d_hash, sizeof *d_hash));
  cudaEvent_t e0, e1;
  DEV_CUDA_CHECK(cudaEventCreate(&e0));
  DEV_CUDA_CHECK(cudaEventCreate(&e1));
  bool any_variant = false;

  for (const Shape& s : shapes) {
    const int N = s.n, K = s.k, ldc = N;
    __nv_bfloat16 *w, *a_req, *a, *c_req0, *c0, *c;
    DEV_CUDA_CHECK(cudaMalloc(&w, size_t(N) * K * 2));
    DEV_CUDA_CHECK(cudaMalloc(&a_req, size_t(kRequestRows) * K * 2));
    DEV_CUDA_CHECK(cudaMalloc(&a, size_t(m_max) * K * 2));
    DEV_CUDA_CHECK(cudaMalloc(&c_req0, size_t(kRequestRows) * ldc * 2));
    DEV_CUDA_CHECK(cudaMalloc(&c0, size_t(m_max) * ldc * 2));
    DEV_CUDA_CHECK(cudaMalloc(&c, size_t(m_max) * ldc * 2));
    fill(w, size_t(N) * K, 1.f / std::sqrt(float(K)), rng);
    fill(a_req, size_t(kRequestRows) * K, 1.f, rng);
    fill(c_req0, size_t(kRequestRows) * ldc, 1.f, rng);

    std::vector<std::string> names;  // the union of every M's candidates, first seen first
    std::vector<cublasLtMatmulAlgo_t> algos;
    std::map<int, std::vector<int>> offered;  // M -> candidate indices in heuristic order
    for (int M : ms) {
      LtProblem p(M, N, K, ldc);
      cublasLtMatmulPreference_t pref;
      LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &kWorkspace, sizeof kWorkspace));
      cublasLtMatmulHeuristicResult_t res[kCandidates];
      int n = 0;
      LT_CHECK(
          cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, kCandidates, res, &n));
      cublasLtMatmulPreferenceDestroy(pref);
      for (int i = 0; i < n; ++i) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
        auto it = std::find_if(algos.begin(), algos.end(), [&](const cublasLtMatmulAlgo_t& x) {
          return std::memcmp(&x, &res[i].algo, sizeof x) == 0;
        });
        int idx = int(it - algos.begin());
        if (it == algos.end())
          names.push_back(config_name(res[i].algo)), algos.push_back(res[i].algo);
        offered[M].push_back(idx);
      }
    }

    // result[M][algo] = (class, µs); class -1 where the algorithm does not run at that M.
    std::map<unsigned long long, int> classes;
    std::vector<std::vector<std::pair<int, float>>> result(
        ms.size(), std::vector<std::pair<int, float>>(algos.size(), {-1, 0.f}));
    for (size_t mi = 0; mi < ms.size(); ++mi) {
      const int M = ms[mi];
      const int off = (M - kRequestRows) * 2 / 3;  // another offset at every M
      fill(a, size_t(M) * K, 1.f, rng);
      fill(c0, size_t(M) * ldc, 1.f, rng);
      DEV_CUDA_CHECK(cudaMemcpy(a + size_t(off) * K, a_req, size_t(kRequestRows) * K * 2,
                                cudaMemcpyDeviceToDevice));
      DEV_CUDA_CHECK(cudaMemcpy(c0 + size_t(off) * ldc, c_req0, size_t(kRequestRows) * ldc * 2,
                                cudaMemcpyDeviceToDevice));
      LtProblem p(M, N, K, ldc);
      const float alpha = 1.f, beta = s.accumulate ? 1.f : 0.f;
      for (size_t ai = 0; ai < algos.size(); ++ai) {
        cublasLtMatmulHeuristicResult_t chk{};
        if (cublasLtMatmulAlgoCheck(lt, p.op, p.a, p.b, p.c, p.c, &algos[ai], &chk) !=
                CUBLAS_STATUS_SUCCESS ||
            chk.state != CUBLAS_STATUS_SUCCESS || chk.workspaceSize > kWorkspace)
          continue;
        auto run = [&] {
          return cublasLtMatmul(lt, p.op, &alpha, w, p.a, a, p.b, &beta, c, p.c, c, p.c, &algos[ai],
                                workspace, kWorkspace, 0);
        };
        std::vector<float> us;
        bool ok = true;
        for (int r = 0; r < 6 && ok; ++r) {
          DEV_CUDA_CHECK(cudaMemcpy(c, c0, size_t(M) * ldc * 2, cudaMemcpyDeviceToDevice));
          DEV_CUDA_CHECK(cudaEventRecord(e0));
          ok = run() == CUBLAS_STATUS_SUCCESS;
          DEV_CUDA_CHECK(cudaEventRecord(e1));
          DEV_CUDA_CHECK(cudaEventSynchronize(e1));
          float ms_ = 0;
          DEV_CUDA_CHECK(cudaEventElapsedTime(&ms_, e0, e1));
          if (r > 0) us.push_back(ms_ * 1000.f);
        }
        if (!ok) continue;
        DEV_CUDA_CHECK(cudaMemset(d_hash, 0, sizeof *d_hash));
        hash_rows<<<264, 256>>>(c + size_t(off) * ldc, ldc, N, kRequestRows, d_hash);
        unsigned long long h = 0;
        DEV_CUDA_CHECK(cudaMemcpy(&h, d_hash, sizeof h, cudaMemcpyDeviceToHost));
        auto [it, fresh] = classes.emplace(h, int(classes.size()));
        std::sort(us.begin(), us.end());
        result[mi][ai] = {it->second, us[us.size() / 2]};
      }
    }

    std::printf("\n== %s: N %d K %d%s; %zu algorithms, %zu classes of the request rows ==\n",
                s.name, N, K, s.accumulate ? " (C +=)" : "", algos.size(), classes.size());
    std::printf("%-58s",
                "algorithm (id tile stages splitK reduction swizzle custom inner cluster)");
    for (int M : ms) std::printf(" %13d", M);
    std::printf("\n");
    std::vector<int> pick(ms.size(), -1);
    for (size_t mi = 0; mi < ms.size(); ++mi) {
      const auto& off = offered[ms[mi]];
      float best = 1e30f;
      for (size_t j = 0; j < off.size() && int(j) < kTimedPick; ++j) {
        const auto& r = result[mi][off[j]];
        if (r.first >= 0 && r.second < best) best = r.second, pick[mi] = off[j];
      }
    }
    int invariant_best = -1;
    double invariant_cost = 1e300;
    for (size_t ai = 0; ai < algos.size(); ++ai) {
      std::printf("%-58s", names[ai].c_str());
      int cls = -2;
      bool everywhere = true;
      double cost = 0;  // sum over M of time / the engine's pick's time
      for (size_t mi = 0; mi < ms.size(); ++mi) {
        const auto& r = result[mi][ai];
        if (r.first < 0) {
          std::printf(" %13s", "-");
          everywhere = false;
          continue;
        }
        if (cls == -2) cls = r.first;
        if (cls != r.first) everywhere = false;
        if (pick[mi] >= 0) cost += r.second / result[mi][pick[mi]].second;
        std::printf(" %c%c %9.1f", 'A' + r.first % 26, pick[mi] == int(ai) ? '*' : ' ', r.second);
      }
      std::printf("%s\n", everywhere ? "  one class" : "");
      if (everywhere && cost < invariant_cost) invariant_cost = cost, invariant_best = int(ai);
    }
    std::vector<int> pick_classes;
    for (size_t mi = 0; mi < ms.size(); ++mi)
      if (pick[mi] >= 0) pick_classes.push_back(result[mi][pick[mi]].first);
    const bool picks_agree = std::all_of(pick_classes.begin(), pick_classes.end(),
                                         [&](int x) { return x == pick_classes.front(); });
    any_variant |= !picks_agree;
    std::printf("engine's picks across M: %s\n",
                picks_agree ? "one class (invariant)" : "SEVERAL classes (not batch invariant)");
    if (invariant_best >= 0) {
      std::printf("fastest one-class algorithm: %s; time / engine pick:",
                  names[invariant_best].c_str());
      for (size_t mi = 0; mi < ms.size(); ++mi)
        if (pick[mi] >= 0)
          std::printf(" %d:%.3f", ms[mi],
                      result[mi][invariant_best].second / result[mi][pick[mi]].second);
      std::printf("\n");
    } else {
      std::printf("no algorithm keeps one class at every M\n");
    }
    for (void* p : {static_cast<void*>(w), static_cast<void*>(a_req), static_cast<void*>(a),
                    static_cast<void*>(c_req0), static_cast<void*>(c0), static_cast<void*>(c)})
      cudaFree(p);
  }
  std::printf(
      "\ngemm: the engine's timed picks are %s\n",
      any_variant ? "NOT batch invariant for some shape" : "batch invariant for every shape");
  return 0;
}

// cuBLASLt GEMMs (see gemm.h). Row-major y[M,N] = x[M,K] W[N,K]^T is column-major y^T = W^T-view
// ... : A = W (col-major K x N, transposed), B = x (col-major K x M), C = D = y (col-major N x M).
#include "engine/cuda/gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace clef::engine::cuda {
namespace {
constexpr size_t kWorkspace = 64ull << 20;
constexpr int kCandidates = 12;
constexpr int kTimedRuns = 2;  // per candidate, after one untimed run (start-up tunes ~100 buckets)
}  // namespace

Gemm::Gemm(bool fp32) : fp32_(fp32), workspace_(kWorkspace) {
  CLEF_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Gemm::~Gemm() {
  for (auto& [k, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (handle_) cublasLtDestroy(handle_);
}

std::string Gemm::name() const {
  return fp32_ ? "cublaslt fp32 (COMPUTE_32F, no TF32), timed heuristic candidates"
               : "cublaslt bf16 (fp32 accumulate), timed heuristic candidates";
}

std::string Gemm::policy() const {
  // Changing how candidates are chosen or timed must invalidate cached choices.
  return "timed heuristic candidates: " + std::to_string(kCandidates) + " at most, " +
         std::to_string(kTimedRuns) + " timed runs after 1, workspace " +
         std::to_string(kWorkspace >> 20) + " MiB; cublasLt " +
         std::to_string(cublasLtGetVersion());
}

void Gemm::preload(const std::vector<TuningEntry>& entries) {
  preloaded_.clear();
  for (const auto& e : entries) {
    static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(e.algo), "cuBLASLt algo is 64 bytes");
    cublasLtMatmulAlgo_t a;
    std::memcpy(&a, e.algo.data(), sizeof a);
    const auto& v = e.shape;
    preloaded_[Key{static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2]),
                   static_cast<int>(v[3]), static_cast<int>(v[4]), v[5] != 0}] = a;
  }
}

std::vector<TuningEntry> Gemm::entries() const {
  std::vector<TuningEntry> out;
  for (const auto& [k, p] : plans_) {
    if (!p.has_algo) continue;
    TuningEntry e;
    const auto [M, N, K, ldx, ldy, acc] = k;
    e.shape = {M, N, K, ldx, ldy, acc ? 1 : 0};
    std::memcpy(e.algo.data(), &p.algo, sizeof p.algo);
    out.push_back(e);
  }
  return out;
}

bool Gemm::try_preloaded(const Key& key, Plan& p, const void* x, const void* w, cudaStream_t s) {
  auto it = preloaded_.find(key);
  if (it == preloaded_.end()) return false;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  CLEF_CUDA_CHECK(cudaStreamIsCapturing(s, &cap));
  if (cap != cudaStreamCaptureStatusNone) return false;  // checked later, outside a capture
  const cublasLtMatmulAlgo_t algo = it->second;
  preloaded_.erase(it);
  cublasLtMatmulHeuristicResult_t check{};
  bool ok = cublasLtMatmulAlgoCheck(handle_, p.op, p.a, p.b, p.c, p.c, &algo, &check) ==
                CUBLAS_STATUS_SUCCESS &&
            check.state == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= kWorkspace;
  if (ok) {
    // One real run into scratch: the choice must work here, and its kernel is loaded before any
    // graph capture needs it.
    const auto [M, N, K, ldx, ldy, acc] = key;
    const size_t out_bytes = static_cast<size_t>(ldy) * M * (fp32_ ? 4 : 2);
    scratch_.resize(out_bytes);
    const float alpha = 1.0f, beta = 0.0f;
    ok = cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, scratch_.get(), p.c,
                        scratch_.get(), p.c, &algo, workspace_.get(), kWorkspace,
                        s) == CUBLAS_STATUS_SUCCESS;
  }
  if (!ok) {
    ++preloaded_rejected_;
    return false;
  }
  p.algo = algo;
  p.has_algo = true;
  ++preloaded_used_;
  return true;
}

int Gemm::fastest(const Plan& p, const Key& key, const cublasLtMatmulHeuristicResult_t* res, int n,
                  const void* x, const void* w, cudaStream_t s) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  CLEF_CUDA_CHECK(cudaStreamIsCapturing(s, &cap));
  if (n <= 1 || cap != cudaStreamCaptureStatusNone) return 0;
  const auto [M, N, K, ldx, ldy, acc] = key;
  // Time each candidate on the real inputs into a scratch output (same layout).
  const size_t out_bytes = static_cast<size_t>(ldy) * M * (fp32_ ? 4 : 2);
  scratch_.resize(out_bytes);
  CLEF_CUDA_CHECK(cudaMemsetAsync(scratch_.get(), 0, out_bytes, s));
  const float alpha = 1.0f, beta = acc ? 1.0f : 0.0f;
  cudaEvent_t e0, e1;
  CLEF_CUDA_CHECK(cudaEventCreate(&e0));
  CLEF_CUDA_CHECK(cudaEventCreate(&e1));
  float best_ms = 1e30f;
  int best = 0;
  for (int i = 0; i < n; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    bool ok = true;
    for (int r = 0; r < kTimedRuns + 1 && ok; ++r) {
      if (r == 1) CLEF_CUDA_CHECK(cudaEventRecord(e0, s));
      ok = cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, scratch_.get(), p.c,
                          scratch_.get(), p.c, &res[i].algo, workspace_.get(), kWorkspace,
                          s) == CUBLAS_STATUS_SUCCESS;
    }
    if (!ok) continue;
    CLEF_CUDA_CHECK(cudaEventRecord(e1, s));
    CLEF_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CLEF_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (ms < best_ms) best_ms = ms, best = i;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return best;
}

Gemm::Plan& Gemm::plan(const Key& key, const void* x, const void* w, void* y, cudaStream_t s) {
  auto it = plans_.find(key);
  if (it != plans_.end() && it->second.has_algo) return it->second;
  const auto [M, N, K, ldx, ldy, acc] = key;
  const cudaDataType_t dt = fp32_ ? CUDA_R_32F : CUDA_R_16BF;
  Plan p;
  CLEF_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CLEF_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CLEF_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, dt, K, N, K));
  CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, dt, K, M, ldx));
  CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, dt, N, M, ldy));
  if (!try_preloaded(key, p, x, w, s)) {
    cublasLtMatmulPreference_t pref;
    CLEF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = kWorkspace;
    CLEF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t res[kCandidates];
    int n = 0;
    CLEF_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref,
                                                     kCandidates, res, &n));
    cublasLtMatmulPreferenceDestroy(pref);
    if (n <= 0)
      throw std::runtime_error("cuBLASLt has no algorithm for GEMM M=" + std::to_string(M) +
                               " N=" + std::to_string(N) + " K=" + std::to_string(K));
    p.algo = res[fastest(p, key, res, n, x, w, s)].algo;
    p.has_algo = true;
  }
  (void)y;
  if (it != plans_.end()) {
    cublasLtMatrixLayoutDestroy(it->second.a);
    cublasLtMatrixLayoutDestroy(it->second.b);
    cublasLtMatrixLayoutDestroy(it->second.c);
    cublasLtMatmulDescDestroy(it->second.op);
    it->second = p;
    return it->second;
  }
  return plans_.emplace(key, p).first->second;
}

void Gemm::tune(const void* x, int ldx, const void* w, void* y, int ldy, int M, int N, int K,
                bool accumulate, cudaStream_t s) {
  if (M > 0) plan(Key{M, N, K, ldx, ldy, accumulate}, x, w, y, s);
}

void Gemm::run(const void* x, int ldx, const void* w, void* y, int ldy, int M, int N, int K,
               bool accumulate, cudaStream_t s) {
  if (M <= 0) return;
  Plan& p = plan(Key{M, N, K, ldx, ldy, accumulate}, x, w, y, s);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CLEF_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c,
                                   &p.algo, workspace_.get(), kWorkspace, s));
}

}  // namespace clef::engine::cuda

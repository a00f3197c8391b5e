// cuBLASLt GEMMs (see gemm.h). Row-major y[M,N] = x[M,K] W[N,K]^T is column-major y^T = W^T-view
// ... : A = W (col-major K x N, transposed), B = x (col-major K x M), C = D = y (col-major N x M).
#include "engine/cuda/gemm.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace clef::engine::cuda {
namespace {
constexpr size_t kWorkspace = 64ull << 20;
constexpr int kCandidates = 16;
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
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  CLEF_CUDA_CHECK(cudaStreamIsCapturing(s, &cap));
  int best = 0;
  if (n > 1 && cap == cudaStreamCaptureStatusNone) {
    // Time each candidate on the real inputs into a scratch output (same layout).
    const size_t out_bytes = static_cast<size_t>(ldy) * M * (fp32_ ? 4 : 2);
    scratch_.resize(out_bytes);
    CLEF_CUDA_CHECK(cudaMemsetAsync(scratch_.get(), 0, out_bytes, s));
    const float alpha = 1.0f, beta = acc ? 1.0f : 0.0f;
    cudaEvent_t e0, e1;
    CLEF_CUDA_CHECK(cudaEventCreate(&e0));
    CLEF_CUDA_CHECK(cudaEventCreate(&e1));
    float best_ms = 1e30f;
    const int reps = 3;
    for (int i = 0; i < n; ++i) {
      if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
      bool ok = true;
      for (int r = 0; r < reps + 1 && ok; ++r) {
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
  }
  p.algo = res[best].algo;
  p.has_algo = true;
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

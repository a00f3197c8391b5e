#include "engine/cuda/head_gemm.h"

#include <stdexcept>
#include <string>

namespace clef::engine::cuda {
namespace {

constexpr size_t kWorkspace = 32u << 20;

// Frees the cuBLASLt descriptors of one call on every path (a throw included).
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

void set_batch(cublasLtMatrixLayout_t l, int batch, int64_t stride) {
  if (batch <= 1) return;
  int32_t count = batch;
  CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                     sizeof count));
  CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                     &stride, sizeof stride));
}

// The alignment every batch's pointer keeps (cuBLASLt assumes 256 bytes unless told; row offsets
// into weights and per-head column offsets are less aligned).
uint32_t alignment(const void* p, int64_t batch_stride_bytes) {
  uint64_t a = reinterpret_cast<uintptr_t>(p) | 256u;
  if (batch_stride_bytes > 0) a |= static_cast<uint64_t>(batch_stride_bytes);
  return static_cast<uint32_t>(a & (~a + 1));  // lowest set bit
}

void set_align(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
               uint32_t bytes) {
  CLEF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof bytes));
}

}  // namespace

HeadGemm::HeadGemm() : workspace_(kWorkspace) {
  CLEF_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

HeadGemm::~HeadGemm() {
  if (handle_) cublasLtDestroy(handle_);
}

// Row-major C = A op(B) is column-major C^T = op(B)^T A^T: cuBLASLt's "A" is our B, its "B" our A.
void HeadGemm::run(bool bf16, int M, int N, int K, const GemmOperand& A, const GemmOperand& B,
                   bool b_is_nk, float* C, int ldc, int64_t c_batch_stride, int batch, float alpha,
                   float beta, cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return;
  const cudaDataType in_t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  Descs d;
  CLEF_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = b_is_nk ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  CLEF_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CLEF_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  // Lt "A" = our B: stored column-major as K x N (b_is_nk) or N x K.
  if (b_is_nk)
    CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, in_t, K, N, B.ld));
  else
    CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, in_t, N, K, B.ld));
  CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, in_t, K, M, A.ld));
  CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, N, M, ldc));
  set_batch(d.a, batch, B.batch_stride);
  set_batch(d.b, batch, A.batch_stride);
  set_batch(d.c, batch, c_batch_stride);

  CLEF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  const size_t ws = workspace_.bytes();
  CLEF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const int64_t esz = bf16 ? 2 : 4;
  const int64_t bs = batch > 1 ? 1 : 0;  // strides matter only with several batches
  set_align(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
            alignment(B.ptr, bs * B.batch_stride * esz));
  set_align(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            alignment(A.ptr, bs * A.batch_stride * esz));
  const uint32_t c_align = alignment(C, bs * c_batch_stride * 4);
  set_align(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c_align);
  set_align(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c_align);
  // The heuristic query costs tens of microseconds: remember its answer per problem shape.
  const AlgoKey key{bf16 ? 1 : 0,
                    M,
                    N,
                    K,
                    A.ld,
                    B.ld,
                    ldc,
                    b_is_nk ? 1 : 0,
                    batch,
                    bs * A.batch_stride,
                    bs * B.batch_stride,
                    bs * c_batch_stride,
                    alignment(B.ptr, bs * B.batch_stride * esz),
                    alignment(A.ptr, bs * A.batch_stride * esz),
                    c_align};
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    CLEF_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, d.op, d.a, d.b, d.c, d.c, d.pref, 1,
                                                     &heur, &found));
    if (found == 0)
      throw std::runtime_error("joint head: cuBLASLt has no algorithm for a " + std::to_string(M) +
                               "x" + std::to_string(N) + "x" + std::to_string(K) + " GEMM");
    if (algos_.size() >= 4096) algos_.clear();  // bounded: shapes vary with the request length
    it = algos_.emplace(key, heur.algo).first;
  }
  CLEF_CUBLAS_CHECK(cublasLtMatmul(handle_, d.op, &alpha, B.ptr, d.a, A.ptr, d.b, &beta, C, d.c, C,
                                   d.c, &it->second, workspace_.get(), ws, stream));
}

}  // namespace clef::engine::cuda

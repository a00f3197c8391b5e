// cuBLASLt for the GEMM workbenches (dev/cuda/gemm.cu, dev/cuda/gemm_swiglu.cu): a status check
// and the matmul descriptor and layouts of our C[M, N] (+)= A[M, K] B[N, K]^T in bf16, laid out as
// the engine's gemm module does (column-major C^T = B A^T).
#pragma once

#include <cublasLt.h>

#include <cstdio>
#include <cstdlib>

#define LT_CHECK(call)                                                                       \
  do {                                                                                       \
    cublasStatus_t lt_s_ = (call);                                                           \
    if (lt_s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
      std::fprintf(stderr, "cuBLASLt error %d in %s (%s:%d)\n", int(lt_s_), #call, __FILE__, \
                   __LINE__);                                                                \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

namespace clef::dev {

struct LtProblem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  LtProblem(int M, int N, int K, int ldc) {
    LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, K, N, K));
    LT_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, K, M, K));
    LT_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, N, M, ldc));
  }
  ~LtProblem() {
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
  }
  LtProblem(const LtProblem&) = delete;
  LtProblem& operator=(const LtProblem&) = delete;
};

}  // namespace clef::dev

// Row-major GEMMs for the joint head through cuBLASLt: C[M, N] = alpha A[M, K] op(B) + beta C, fp32
// accumulation and fp32 output, optional strided batches (one per attention head). op(B) = B^T when
// B is stored [N, K] (a Linear weight), B when stored [K, N]. A and B are both fp32 (pure fp32
// math, no TF32) or both bf16.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>

#include "engine/cuda/cuda_check.h"

namespace clef::engine::cuda {

struct GemmOperand {
  const void* ptr = nullptr;
  int ld = 0;                // leading dimension (row stride) in elements
  int64_t batch_stride = 0;  // elements between batches
};

class HeadGemm {
 public:
  HeadGemm();
  ~HeadGemm();
  HeadGemm(const HeadGemm&) = delete;
  HeadGemm& operator=(const HeadGemm&) = delete;

  // bf16: A and B are __nv_bfloat16 (else float). C is float with leading dimension ldc.
  void run(bool bf16, int M, int N, int K, const GemmOperand& A, const GemmOperand& B, bool b_is_nk,
           float* C, int ldc, int64_t c_batch_stride, int batch, float alpha, float beta,
           cudaStream_t stream);

 private:
  using AlgoKey = std::array<int64_t, 15>;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace clef::engine::cuda

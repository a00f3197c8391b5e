// y = x W^T through cuBLASLt (row-major activations x [M, K], weights W [N, K], output [M, N]),
// bf16 or fp32 operands with fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32 in parity mode).
// `accumulate` fuses the residual add (D = x W^T + D, beta = 1). The algorithm for each shape is
// chosen once by timing every candidate the heuristic returns, and cached; timing never runs while
// the stream is being captured.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <tuple>

#include "engine/cuda/cuda_check.h"

namespace clef::engine::cuda {

class Gemm {
 public:
  explicit Gemm(bool fp32);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void run(const void* x, int ldx, const void* w, void* y, int ldy, int M, int N, int K,
           bool accumulate, cudaStream_t s);
  // Picks (and caches) the algorithm for this shape now; run() does it lazily otherwise.
  void tune(const void* x, int ldx, const void* w, void* y, int ldy, int M, int N, int K,
            bool accumulate, cudaStream_t s);
  std::string name() const;
  size_t tuned_shapes() const { return plans_.size(); }

 private:
  using Key = std::tuple<int, int, int, int, int, bool>;  // M, N, K, ldx, ldy, accumulate
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool has_algo = false;
  };
  Plan& plan(const Key& k, const void* x, const void* w, void* y, cudaStream_t s);

  bool fp32_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer scratch_;  // timing output, so tuning never touches the real output
  std::map<Key, Plan> plans_;
};

}  // namespace clef::engine::cuda

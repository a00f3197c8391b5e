// y = x W^T through cuBLASLt (row-major activations x [M, K], weights W [N, K], output [M, N]),
// bf16 or fp32 operands with fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32 in parity mode).
// `accumulate` fuses the residual add (D = x W^T + D, beta = 1). The algorithm for each shape is
// chosen once by timing the heuristic's candidates, and cached; timing never runs while the stream
// is being captured. Choices can be exported and preloaded (the tuning cache,
// engine/prepare/tuning_cache.h): a preloaded choice is used only after cuBLASLt accepts it for the
// shape and one run succeeds.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/prepare/tuning_cache.h"

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
  // What a tuning cache must match besides the device: the library's version and the policy.
  std::string policy() const;
  size_t tuned_shapes() const { return plans_.size(); }

  // Choices to try before timing (from a tuning cache); replaces earlier preloads.
  void preload(const std::vector<TuningEntry>& entries);
  // Every chosen algorithm, for the tuning cache.
  std::vector<TuningEntry> entries() const;
  size_t preloaded_used() const { return preloaded_used_; }  // shapes that took a preload
  size_t preloaded_rejected() const { return preloaded_rejected_; }

 private:
  using Key = std::tuple<int, int, int, int, int, bool>;  // M, N, K, ldx, ldy, accumulate
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool has_algo = false;
  };
  Plan& plan(const Key& k, const void* x, const void* w, void* y, cudaStream_t s);
  // Times the heuristic's candidates on the real inputs (into scratch); index of the fastest.
  int fastest(const Plan& p, const Key& key, const cublasLtMatmulHeuristicResult_t* res, int n,
              const void* x, const void* w, cudaStream_t s);
  // A preloaded algorithm for this shape, if cuBLASLt accepts it and one run into scratch works.
  bool try_preloaded(const Key& key, Plan& p, const void* x, const void* w, cudaStream_t s);

  bool fp32_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer scratch_;  // timing output, so tuning never touches the real output
  std::map<Key, Plan> plans_;
  std::map<Key, cublasLtMatmulAlgo_t> preloaded_;
  size_t preloaded_used_ = 0, preloaded_rejected_ = 0;
};

}  // namespace clef::engine::cuda

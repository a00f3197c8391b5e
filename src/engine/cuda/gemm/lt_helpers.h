// What the GEMM module's sources share (cublaslt.cpp, batch_invariant.cpp): cuBLASLt's type
// names, the alignments a heuristic must be told, a workspace preference, a problem's name.
#pragma once

#include <string>

#include "engine/cuda/gemm/gemm.h"

namespace clef::engine::cuda::lt {

inline constexpr size_t kWorkspace = 64ull << 20;
// The head's heuristic queries were answered for a 32 MiB workspace; keeping that bound keeps its
// choices (and so its sums) as they were.
inline constexpr size_t kHeuristicWorkspace = 32ull << 20;

inline cudaDataType_t lt_type(DataType t) {
  switch (t) {
    case DataType::F32:
      return CUDA_R_32F;
    case DataType::BF16:
      return CUDA_R_16BF;
    case DataType::F8_E4M3:
      return CUDA_R_8F_E4M3;
  }
  return CUDA_R_32F;
}

// The alignment every batch's pointer keeps (cuBLASLt assumes 256 bytes unless told; row offsets
// into weights and per-head column offsets are less aligned).
inline uint32_t alignment(const void* p, int64_t batch_stride_bytes) {
  uint64_t a = reinterpret_cast<uintptr_t>(p) | 256u;
  if (batch_stride_bytes > 0) a |= static_cast<uint64_t>(batch_stride_bytes);
  return static_cast<uint32_t>(a & (~a + 1));  // lowest set bit
}

struct Alignments {
  uint32_t a = 0, b = 0, c = 0;
};

inline Alignments alignments_of(const GemmProblem& p) {
  const int64_t bs = p.batch > 1 ? 1 : 0;  // strides matter only with several batches
  return {alignment(p.a.ptr, bs * p.a.batch_stride * int64_t(data_type_bytes(p.a.dtype))),
          alignment(p.b.ptr, bs * p.b.batch_stride * int64_t(data_type_bytes(p.b.dtype))),
          alignment(p.c, bs * p.c_batch_stride * int64_t(data_type_bytes(p.c_dtype)))};
}

inline void set_batch(cublasLtMatrixLayout_t l, int batch, int64_t stride) {
  if (batch <= 1) return;
  int32_t count = batch;
  CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                     sizeof count));
  CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                     &stride, sizeof stride));
}

struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  explicit Preference(size_t workspace) {
    CLEF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p));
    CLEF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
  }
  ~Preference() { cublasLtMatmulPreferenceDestroy(p); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  void align(cublasLtMatmulPreferenceAttributes_t attr, uint32_t bytes) {
    CLEF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &bytes, sizeof bytes));
  }
  // A Heuristic problem's pointers as they are (Lt's A is our B, its B our A).
  void align(const Alignments& al) {
    align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al.b);
    align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al.a);
    align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al.c);
    align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al.c);
  }
};

inline std::string shape_text(const GemmProblem& p) {
  return std::to_string(p.M) + "x" + std::to_string(p.N) + "x" + std::to_string(p.K);
}

inline bool scaled(const GemmProblem& p) {
  return p.a.scale_mode != ScaleMode::None || p.b.scale_mode != ScaleMode::None;
}

}  // namespace clef::engine::cuda::lt

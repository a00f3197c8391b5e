// One GEMM module for the backbone and the joint head: row-major C[M, N] = A[M, K] op(B) (+ C),
// through cuBLASLt with fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32, so fp32 operands give
// fp32 parity). op(B) = B^T when B is stored [N, K] (a Linear's weight), B when stored [K, N].
// Operands carry their own element type and scale, so a new weight format (FP8 with block
// scales) is an operand tag, not a new code path. One handle, one workspace, one plan cache.
//
// Two ways to choose an algorithm, per call site:
//   Timed      the backbone's GEMMs: the heuristic's candidates are timed once on the real inputs
//              (into scratch; never while the stream is being captured) and the fastest kept;
//              choices can be exported and preloaded (engine/prepare/tuning_cache.h); a preloaded
//              choice is used only after cuBLASLt accepts it and one run succeeds.
//   Heuristic  the head's GEMMs (shapes vary with every request): the heuristic's first answer,
//              cached per problem.
// Batch invariance (the default; gemm/batch_invariant.cpp): a row's result must not depend on how
// many rows share its GEMM, and cuBLASLt picks its kernels (tiles, split K) by M. So a shape (a
// problem less its M) is given, once, a class of algorithms that give a row the same bits at every
// probe size and as one another, and each M chooses among them only (Timed: the fastest member at
// its M, or of the heuristic's own answers at that M that give the class's bits there, unless a
// tuning cache names one; Heuristic: the member fastest at the nearest probe). The
// usual ways above apply where there is no class (FP8, strided batches, a shape first met inside a
// stream capture, no candidate that keeps its rows).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/cuda/batch_invariance.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/data_type.h"
#include "engine/prepare/tuning_cache.h"

namespace clef::engine::cuda {

// How an operand's values are scaled (FP8). The one scaled form run (sm_90, cuBLASLt >= 12.9):
//   a = activations [M, K] e4m3, Vec128: one float per token per 128 channels (VEC128_32F),
//       scale(m, kb) = a.scale[kb * M + m]  (tokens fastest); M a multiple of 4 (cuBLASLt 13.1
//       on sm_90 has no algorithm otherwise: pad the token bucket);
//   b = weights [N, K] e4m3 (b_is_nk), Block128x128: one float per 128x128 block
//       (BLK128x128_32F), scale(nb, kb) = b.scale[nb * fp8_weight_scale_ld(K) + kb]: the HF
//       weight_scale_inv grid with each row padded to a multiple of 4 floats (measured on the
//       H200 with cuBLASLt 13.1: unpadded rows give wrong results, silently, when ceil(K/128) % 4);
//   C bf16 or fp32, batch 1, K and both row strides multiples of 16 (16-byte rows). Anything else
//   scaled is refused with a clear error (keep that GEMM in bf16). PerTensor is not run.
enum class ScaleMode { None, PerTensor, Block128x128, Vec128 };

// Row stride (floats) of the FP8 GEMM's weight scale grid: ceil(K / 128) rounded up to 4.
inline int fp8_weight_scale_ld(int K) {
  return ((K + 127) / 128 + 3) / 4 * 4;
}

struct GemmOperand {
  const void* ptr = nullptr;
  DataType dtype = DataType::BF16;
  int ld = 0;                // leading dimension (row stride) in elements
  int64_t batch_stride = 0;  // elements between batches
  const float* scale = nullptr;
  ScaleMode scale_mode = ScaleMode::None;
};

enum class GemmTuning { Timed, Heuristic };

struct GemmProblem {
  int M = 0, N = 0, K = 0;
  GemmOperand a;  // [M, K] row-major
  GemmOperand b;  // [N, K] when b_is_nk (a Linear's weight), else [K, N]
  bool b_is_nk = true;
  void* c = nullptr;  // [M, N] row-major, c_dtype, leading dimension ldc
  DataType c_dtype = DataType::F32;
  int ldc = 0;
  int64_t c_batch_stride = 0;
  int batch = 1;            // strided batches (no engine caller since the head's attention kernel)
  bool accumulate = false;  // C += A op(B) (beta = 1): the residual add, fused
  // [N] in c_dtype, added to every output row before the one rounding to c_dtype
  // (CUBLASLT_EPILOGUE_BIAS): a Linear's bias, fused. 16-byte aligned. Heuristic problems only
  // (the tuning cache's shapes do not name it).
  const void* bias = nullptr;
  // With bias, not with accumulate: the tanh-form GELU of (A op(B) + bias) in fp32 before that one
  // rounding (CUBLASLT_EPILOGUE_GELU_BIAS). The vision MLP's fc1 + gelu_pytorch_tanh in one pass;
  // the unfused reference rounds the biased output to c_dtype before its GELU.
  bool gelu = false;
  GemmTuning tuning = GemmTuning::Timed;
};

class Gemm {
 public:
  explicit Gemm(bool batch_invariant = cuda::batch_invariant());
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void run(const GemmProblem& p, cudaStream_t s);
  // p (a Timed problem) with the algorithm chosen for the same problem at algo_m rows (>= p.M;
  // chosen now if it was not before), so an M between two tuned sizes times nothing: a forward at
  // its exact rows borrows its token bucket's choice. Under batch invariance that choice is a
  // member of the shape's class, which gives a row the same bits at every M, so p's rows get the
  // bits they get at algo_m. Where cuBLASLt refuses the algorithm at p.M, p's own choice (plan:
  // timed now, a class member under invariance) runs instead. algo_m == p.M: run(p).
  void run_as(const GemmProblem& p, int algo_m, cudaStream_t s);
  // Chooses (and caches) the algorithm now; run() does it lazily otherwise.
  void tune(const GemmProblem& p, cudaStream_t s);

  // What a tuning cache must match besides the device: the library's version and the policy.
  std::string policy() const;
  size_t tuned_shapes() const;  // Timed problems with a chosen algorithm
  // Choices to try before timing (from a tuning cache); replaces earlier preloads.
  void preload(const std::vector<TuningEntry>& entries);
  std::vector<TuningEntry> entries() const;  // every Timed choice, for the tuning cache
  size_t preloaded_used() const { return preloaded_used_; }
  size_t preloaded_rejected() const { return preloaded_rejected_; }
  bool batch_invariant() const { return batch_invariant_; }
  // Shapes given a class of bit-equal algorithms for every M, and those left a choice per M.
  size_t invariant_groups() const;
  size_t variant_groups() const;
  // Algorithms a Timed problem's own M added to its shape's class (own_candidates), summed.
  size_t own_candidates_admitted() const { return own_admitted_; }

 private:
  // Everything cuBLASLt's choice can depend on. Alignments matter only for Heuristic problems
  // (Timed operands are whole allocations, 256-byte aligned).
  struct Key {
    std::array<int64_t, 22> v{};
    bool operator<(const Key& o) const { return v < o.v; }
  };
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;      // the most this plan may use
    bool timed = false;        // chosen by timing (persisted in the tuning cache)
    TuningEntry::Shape shape;  // the tuning cache's name for the problem (timed plans)
  };
  static Key key_of(const GemmProblem& p);
  static TuningEntry::Shape tuning_shape(const GemmProblem& p);
  Plan& plan(const GemmProblem& p, cudaStream_t s);
  Plan make_descriptors(const GemmProblem& p) const;
  bool choose_preloaded(const GemmProblem& p, Plan& plan, cudaStream_t s);
  void choose_timed(const GemmProblem& p, Plan& plan, cudaStream_t s);
  void choose_heuristic(const GemmProblem& p, Plan& plan);
  cublasStatus_t launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const GemmProblem& p,
                        void* c, cudaStream_t s);
  static void destroy(Plan& plan);
  void drop_heuristic_plans();
  // Whether cuBLASLt runs algo for plan's problem within workspace bytes.
  bool accepts(const Plan& plan, const cublasLtMatmulAlgo_t& algo, size_t workspace) const;
  // The heuristic's first n answers for plan's problem that it says run.
  std::vector<cublasLtMatmulAlgo_t> heuristic_algos(const Plan& plan,
                                                    cublasLtMatmulPreference_t pref, int n);
  // Milliseconds of `runs` launches of algo on p into c (negative where a launch fails).
  float time_ms(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const GemmProblem& p, void* c,
                int runs, cudaStream_t s);
  // Time each of cands on p (into scratch) and return the fastest's index (0 inside a capture).
  size_t fastest(const GemmProblem& p, const Plan& plan,
                 const std::vector<cublasLtMatmulAlgo_t>& cands, cudaStream_t s);
  // Batch invariance (batch_invariant.cpp): a shape's class, the algorithms that give a row the
  // same bits at every probe M and one another, each with its time at each probe; every M of the
  // shape picks among them. Empty: no such algorithm (the usual choice then).
  // For Timed problems it keeps the probe's request rows (A, and C where the problem accumulates)
  // and the class's bits for them, so that each M can admit the heuristic's own answers there
  // that give the same bits (own_candidates).
  struct Group {
    std::vector<cublasLtMatmulAlgo_t> algos;
    std::vector<std::vector<float>> ms;  // [algo][probe]
    std::vector<unsigned char> rows_a, rows_c, bits;
  };
  static std::string group_policy();
  bool choose_group(const GemmProblem& p, Plan& plan, cudaStream_t s);
  Group select_group(const GemmProblem& p, size_t workspace, cudaStream_t s);
  // The heuristic's answers at p's own M (a Timed problem of the group's shape) that are not in
  // the group and give the probe's request rows the class's bits at this M.
  std::vector<cublasLtMatmulAlgo_t> own_candidates(const GemmProblem& p, const Plan& plan,
                                                   const Group& g, cudaStream_t s);
  // The probe's request rows computed by algo in the probe problem q (A and C zero but for the
  // request at row `off`; rows_c loaded into C first where q accumulates) into `got`; false where
  // the launch fails.
  bool probe_rows(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const GemmProblem& q, int off,
                  const std::vector<unsigned char>& rows_c, std::vector<unsigned char>& got,
                  cudaStream_t s);

  bool batch_invariant_ = true;

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer scratch_;  // timing output, so tuning never touches the real output
  std::map<Key, Plan> plans_;
  size_t heuristic_plans_ = 0;
  std::map<TuningEntry::Shape, cublasLtMatmulAlgo_t> preloaded_;
  size_t preloaded_used_ = 0, preloaded_rejected_ = 0;
  std::map<Key, Group> groups_;  // by key_of with M = 0
  // run_as's plans: p's descriptors with the algorithm of p at algo_m, by (key_of(p), algo_m).
  // refused: cuBLASLt did not take that algorithm at p.M (plan(p) runs). Bounded: cleared when
  // full (a rebuild is a few descriptor calls).
  struct Borrowed {
    Plan plan;
    bool refused = false;
  };
  std::map<std::pair<Key, int>, Borrowed> borrowed_;
  static constexpr size_t kMaxBorrowedPlans = 8192;
  size_t own_admitted_ = 0;
};

}  // namespace clef::engine::cuda

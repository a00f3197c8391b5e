// The GEMM module through cuBLASLt (gemm.h). Row-major C[M, N] = A[M, K] op(B) is column-major
// C^T = op(B)^T A^T: cuBLASLt's "A" is our B (K x N transposed when B is [N, K]), its "B" our A
// (K x M), C = D = our C (N x M).
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/cuda/event_timing.h"
#include "engine/cuda/gemm/gemm.h"
#include "engine/cuda/gemm/lt_helpers.h"

namespace clef::engine::cuda {
using namespace lt;
namespace {

constexpr int kCandidates = 12;
constexpr int kTimedRuns = 2;  // per candidate, after one untimed run (start-up tunes ~100 buckets)
constexpr size_t kMaxHeuristicPlans = 4096;  // bounded: head shapes vary with every request

}  // namespace

Gemm::Gemm(bool batch_invariant) : batch_invariant_(batch_invariant), workspace_(kWorkspace) {
  CLEF_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Gemm::~Gemm() {
  for (auto& [k, p] : plans_) destroy(p);
  for (auto& [k, b] : borrowed_) destroy(b.plan);
  if (handle_) cublasLtDestroy(handle_);
}

void Gemm::destroy(Plan& p) {
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.op) cublasLtMatmulDescDestroy(p.op);
  p = Plan{};
}

std::string Gemm::policy() const {
  // Changing how candidates are chosen or timed must invalidate cached choices.
  return "timed heuristic candidates: " + std::to_string(kCandidates) + " at most, " +
         std::to_string(kTimedRuns) + " timed runs after 1, workspace " +
         std::to_string(kWorkspace >> 20) + " MiB; cublasLt " +
         std::to_string(cublasLtGetVersion()) + (batch_invariant_ ? "; " + group_policy() : "");
}

size_t Gemm::tuned_shapes() const {
  return plans_.size() - heuristic_plans_;
}

Gemm::Key Gemm::key_of(const GemmProblem& p) {
  const bool heur = p.tuning == GemmTuning::Heuristic;
  const Alignments al = heur ? alignments_of(p) : Alignments{};
  const int64_t bs = p.batch > 1 ? 1 : 0;
  Key k;
  k.v = {heur ? 1 : 0,
         p.M,
         p.N,
         p.K,
         p.a.ld,
         p.b.ld,
         p.ldc,
         static_cast<int64_t>(p.a.dtype),
         static_cast<int64_t>(p.b.dtype),
         static_cast<int64_t>(p.c_dtype),
         static_cast<int64_t>(p.a.scale_mode),
         static_cast<int64_t>(p.b.scale_mode),
         p.b_is_nk ? 1 : 0,
         p.accumulate ? 1 : 0,
         p.batch,
         bs * p.a.batch_stride,
         bs * p.b.batch_stride,
         bs * p.c_batch_stride,
         al.a,
         al.b,
         al.c,
         p.bias ? (p.gelu ? 2 : 1) : 0};
  return k;
}

TuningEntry::Shape Gemm::tuning_shape(const GemmProblem& p) {
  return {p.M,
          p.N,
          p.K,
          p.a.ld,
          p.ldc,
          p.accumulate ? 1 : 0,
          static_cast<int64_t>(p.a.dtype),
          static_cast<int64_t>(p.b.dtype),
          static_cast<int64_t>(p.c_dtype)};
}

void Gemm::preload(const std::vector<TuningEntry>& entries) {
  preloaded_.clear();
  for (const auto& e : entries) {
    static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(e.algo), "cuBLASLt algo is 64 bytes");
    cublasLtMatmulAlgo_t a;
    std::memcpy(&a, e.algo.data(), sizeof a);
    preloaded_[e.shape] = a;
  }
}

std::vector<TuningEntry> Gemm::entries() const {
  std::vector<TuningEntry> out;
  for (const auto& [k, p] : plans_) {
    if (!p.timed) continue;  // heuristic choices are not worth persisting
    TuningEntry e;
    e.shape = p.shape;
    std::memcpy(e.algo.data(), &p.algo, sizeof p.algo);
    out.push_back(e);
  }
  return out;
}

namespace {

// The GELU epilogue is the bias epilogue's variant; with beta = 1 its order against C's add is not
// what the tower needs, so it is refused rather than guessed.
void check_gelu(const GemmProblem& p) {
  if (p.gelu && (!p.bias || p.accumulate))
    throw std::invalid_argument("gemm " + shape_text(p) +
                                ": the GELU epilogue needs a bias and no accumulation");
}

// The one scaled form gemm.h documents; anything else is refused by name before cuBLASLt sees it.
void check_fp8(const GemmProblem& p) {
  auto refuse = [&](const std::string& why) {
    throw std::runtime_error("gemm " + shape_text(p) + ": FP8 " + why);
  };
  if (p.a.dtype != DataType::F8_E4M3 || p.a.scale_mode != ScaleMode::Vec128 || !p.a.scale)
    refuse("needs activations in e4m3 with 1x128 (Vec128) scales");
  if (p.b.dtype != DataType::F8_E4M3 || p.b.scale_mode != ScaleMode::Block128x128 || !p.b.scale)
    refuse("needs weights in e4m3 with 128x128 block scales");
  if (!p.b_is_nk) refuse("needs weights stored [N, K] (cuBLASLt runs FP8 as TN only)");
  if (p.batch != 1) refuse("is not batched");
  if (p.M % 4 != 0)
    refuse("needs M (tokens) a multiple of 4, got " + std::to_string(p.M) + " (pad the bucket)");
  if (p.c_dtype != DataType::BF16 && p.c_dtype != DataType::F32) refuse("writes bf16 or fp32");
  if (p.K % 16 != 0 || p.a.ld % 16 != 0 || p.b.ld % 16 != 0)
    refuse("needs K and the row strides multiples of 16 (K " + std::to_string(p.K) + ", lda " +
           std::to_string(p.a.ld) + ", ldb " + std::to_string(p.b.ld) + ")");
  if ((static_cast<size_t>(p.ldc) * data_type_bytes(p.c_dtype)) % 16 != 0)
    refuse("needs 16-byte output rows (ldc " + std::to_string(p.ldc) + ")");
}

}  // namespace

Gemm::Plan Gemm::make_descriptors(const GemmProblem& p) const {
  if (scaled(p)) check_fp8(p);
  Plan pl;
  try {
    CLEF_CUBLAS_CHECK(cublasLtMatmulDescCreate(&pl.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = p.b_is_nk ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    CLEF_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CLEF_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    // Lt "A" = our B: column-major K x N (stored [N, K]) or N x K (stored [K, N]).
    if (p.b_is_nk)
      CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl.a, lt_type(p.b.dtype), p.K, p.N, p.b.ld));
    else
      CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl.a, lt_type(p.b.dtype), p.N, p.K, p.b.ld));
    CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl.b, lt_type(p.a.dtype), p.K, p.M, p.a.ld));
    CLEF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl.c, lt_type(p.c_dtype), p.N, p.M, p.ldc));
    set_batch(pl.a, p.batch, p.b.batch_stride);
    set_batch(pl.b, p.batch, p.a.batch_stride);
    set_batch(pl.c, p.batch, p.c_batch_stride);
    if (p.bias) {  // Lt's rows are our columns: its per-row bias is our per-column (per output) one
      const cublasLtEpilogue_t ep = p.gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
      CLEF_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
      const cudaDataType_t bt = lt_type(p.c_dtype);
      CLEF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                       &bt, sizeof bt));
      CLEF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &p.bias, sizeof p.bias));
    }
    if (scaled(p)) {  // Lt's A is our B (weights), Lt's B our A (activations)
      const cublasLtMatmulMatrixScale_t wm = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                        am = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      CLEF_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &wm, sizeof wm));
      CLEF_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &am, sizeof am));
      // The heuristic wants pointers too (INVALID_VALUE without); launch() sets each call's own.
      const void* ws = p.b.scale;
      const void* as = p.a.scale;
      CLEF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                       &ws, sizeof ws));
      CLEF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                       &as, sizeof as));
    }
  } catch (...) {
    destroy(pl);
    throw;
  }
  return pl;
}

cublasStatus_t Gemm::launch(const Plan& pl, const cublasLtMatmulAlgo_t& algo, const GemmProblem& p,
                            void* c, cudaStream_t s) {
  const float alpha = 1.0f, beta = p.accumulate ? 1.0f : 0.0f;
  if (scaled(p)) {  // plans are shared by every layer of a shape: the scales are per call
    const void* ws = p.b.scale;
    const void* as = p.a.scale;
    cublasStatus_t st =
        cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &as,
                                          sizeof as);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }
  if (p.bias) {  // shared plans too: the bias is per call
    const cublasStatus_t st = cublasLtMatmulDescSetAttribute(
        pl.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }
  return cublasLtMatmul(handle_, pl.op, &alpha, p.b.ptr, pl.a, p.a.ptr, pl.b, &beta, c, pl.c, c,
                        pl.c, &algo, workspace_.get(), pl.workspace, s);
}

bool Gemm::choose_preloaded(const GemmProblem& p, Plan& pl, cudaStream_t s) {
  auto it = preloaded_.find(tuning_shape(p));
  if (it == preloaded_.end()) return false;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  CLEF_CUDA_CHECK(cudaStreamIsCapturing(s, &cap));
  if (cap != cudaStreamCaptureStatusNone) return false;  // checked later, outside a capture
  // (Kept: batch invariance picks a shape's class of algorithms by its cached ones.)
  const cublasLtMatmulAlgo_t algo = it->second;
  bool ok = accepts(pl, algo, kWorkspace);
  if (ok) {
    // One real run into scratch: the choice must work here, and its kernel is loaded before any
    // graph capture needs it.
    scratch_.resize(static_cast<size_t>(p.ldc) * p.M * data_type_bytes(p.c_dtype));
    ok = launch(pl, algo, p, scratch_.get(), s) == CUBLAS_STATUS_SUCCESS;
  }
  if (!ok) {
    ++preloaded_rejected_;
    return false;
  }
  pl.algo = algo;
  ++preloaded_used_;
  return true;
}

bool Gemm::accepts(const Plan& pl, const cublasLtMatmulAlgo_t& algo, size_t workspace) const {
  cublasLtMatmulHeuristicResult_t check{};
  return cublasLtMatmulAlgoCheck(handle_, pl.op, pl.a, pl.b, pl.c, pl.c, &algo, &check) ==
             CUBLAS_STATUS_SUCCESS &&
         check.state == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= workspace;
}

std::vector<cublasLtMatmulAlgo_t> Gemm::heuristic_algos(const Plan& pl,
                                                        cublasLtMatmulPreference_t pref, int n) {
  std::vector<cublasLtMatmulHeuristicResult_t> res(static_cast<size_t>(n));
  int found = 0;
  std::vector<cublasLtMatmulAlgo_t> out;
  if (cublasLtMatmulAlgoGetHeuristic(handle_, pl.op, pl.a, pl.b, pl.c, pl.c, pref, n, res.data(),
                                     &found) != CUBLAS_STATUS_SUCCESS)
    return out;
  for (int i = 0; i < found; ++i)
    if (res[i].state == CUBLAS_STATUS_SUCCESS) out.push_back(res[i].algo);
  return out;
}

float Gemm::time_ms(const Plan& pl, const cublasLtMatmulAlgo_t& algo, const GemmProblem& p, void* c,
                    int runs, cudaStream_t s) {
  bool ok = true;
  const float ms = elapsed_ms(s, [&] {
    for (int r = 0; r < runs && ok; ++r) ok = launch(pl, algo, p, c, s) == CUBLAS_STATUS_SUCCESS;
  });
  return ok ? ms : -1.0f;
}

void Gemm::choose_timed(const GemmProblem& p, Plan& pl, cudaStream_t s) {
  Preference pref(kWorkspace);
  const std::vector<cublasLtMatmulAlgo_t> cands = heuristic_algos(pl, pref.p, kCandidates);
  if (cands.empty())
    throw std::runtime_error("cuBLASLt has no algorithm for GEMM " + shape_text(p));
  pl.algo = cands[fastest(p, pl, cands, s)];
}

size_t Gemm::fastest(const GemmProblem& p, const Plan& pl,
                     const std::vector<cublasLtMatmulAlgo_t>& cands, cudaStream_t s) {
  size_t best = 0;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  CLEF_CUDA_CHECK(cudaStreamIsCapturing(s, &cap));
  if (cands.size() < 2 || cap != cudaStreamCaptureStatusNone) return best;
  // Time each candidate on the real inputs into a scratch output (same layout).
  const size_t out_bytes = static_cast<size_t>(p.ldc) * p.M * data_type_bytes(p.c_dtype);
  scratch_.resize(out_bytes);
  CLEF_CUDA_CHECK(cudaMemsetAsync(scratch_.get(), 0, out_bytes, s));
  float best_ms = 1e30f;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (launch(pl, cands[i], p, scratch_.get(), s) != CUBLAS_STATUS_SUCCESS) continue;  // untimed
    const float ms = time_ms(pl, cands[i], p, scratch_.get(), kTimedRuns, s);
    if (ms >= 0 && ms < best_ms) best_ms = ms, best = i;
  }
  return best;
}

void Gemm::choose_heuristic(const GemmProblem& p, Plan& pl) {
  pl.workspace = kHeuristicWorkspace;
  Preference pref(kHeuristicWorkspace);
  pref.align(alignments_of(p));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  CLEF_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, pl.op, pl.a, pl.b, pl.c, pl.c, pref.p,
                                                   1, &heur, &found));
  if (found == 0) throw std::runtime_error("cuBLASLt has no algorithm for GEMM " + shape_text(p));
  pl.algo = heur.algo;
}

void Gemm::drop_heuristic_plans() {
  for (auto it = plans_.begin(); it != plans_.end();) {
    if (!it->second.timed) {
      destroy(it->second);
      it = plans_.erase(it);
    } else {
      ++it;
    }
  }
  heuristic_plans_ = 0;
}

Gemm::Plan& Gemm::plan(const GemmProblem& p, cudaStream_t s) {
  const Key key = key_of(p);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan pl = make_descriptors(p);
  try {
    if (p.tuning == GemmTuning::Heuristic) {
      pl.workspace = kHeuristicWorkspace;
      if (!choose_group(p, pl, s)) choose_heuristic(p, pl);
    } else {
      pl.workspace = kWorkspace;
      pl.timed = true;
      pl.shape = tuning_shape(p);
      // A cached choice first: the policy (batch invariance included) is part of the cache's key.
      if (!choose_preloaded(p, pl, s) && !choose_group(p, pl, s)) choose_timed(p, pl, s);
    }
  } catch (...) {
    destroy(pl);
    throw;
  }
  if (p.tuning == GemmTuning::Heuristic) {
    if (heuristic_plans_ >= kMaxHeuristicPlans) drop_heuristic_plans();
    ++heuristic_plans_;
  }
  return plans_.emplace(key, pl).first->second;
}

void Gemm::tune(const GemmProblem& p, cudaStream_t s) {
  check_gelu(p);
  if (p.M > 0 && p.N > 0 && p.K > 0 && p.batch > 0) plan(p, s);
}

void Gemm::run(const GemmProblem& p, cudaStream_t s) {
  check_gelu(p);
  if (p.M <= 0 || p.N <= 0 || p.K <= 0 || p.batch <= 0) return;
  const Plan& pl = plan(p, s);
  CLEF_CUBLAS_CHECK(launch(pl, pl.algo, p, p.c, s));
}

void Gemm::run_as(const GemmProblem& p, int algo_m, cudaStream_t s) {
  if (algo_m == p.M || p.M <= 0) return run(p, s);
  check_gelu(p);
  if (p.tuning != GemmTuning::Timed || algo_m < p.M)
    throw std::logic_error("gemm " + shape_text(p) + ": run_as borrows a Timed problem's choice " +
                           "at no fewer rows (asked for M = " + std::to_string(algo_m) + ")");
  if (p.N <= 0 || p.K <= 0 || p.batch <= 0) return;
  const auto key = std::make_pair(key_of(p), algo_m);
  auto it = borrowed_.find(key);
  if (it == borrowed_.end()) {
    GemmProblem at = p;
    at.M = algo_m;
    const Plan& src = plan(at, s);
    if (borrowed_.size() >= kMaxBorrowedPlans) {
      for (auto& [k, b] : borrowed_) destroy(b.plan);
      borrowed_.clear();
    }
    Borrowed b;
    b.plan = make_descriptors(p);
    b.plan.algo = src.algo;
    b.plan.workspace = src.workspace;
    b.refused = !accepts(b.plan, b.plan.algo, b.plan.workspace);
    it = borrowed_.emplace(key, b).first;
  }
  if (it->second.refused) return run(p, s);
  CLEF_CUBLAS_CHECK(launch(it->second.plan, it->second.plan.algo, p, p.c, s));
}

}  // namespace clef::engine::cuda

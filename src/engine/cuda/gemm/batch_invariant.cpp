// Batch invariance of the GEMM module (gemm.h, issue 14). A packed forward runs one GEMM over the
// rows of every request in the pack, so a request's rows meet GEMMs of many M. cuBLASLt chooses
// kernels by M, and kernels that split K (or schedule tiles by the problem's size) round a row's
// sums in another order. So a shape (a problem less its M) is given a class of algorithms, once:
//   * the candidates are the heuristic's first answers at each probe M;
//   * each runs at every probe M on the same random "request" rows, placed at another row offset
//     at each M (zeros around them); one whose rows differ bit for bit between probes is dropped;
//   * the rest fall into classes of equal bits (on an H100 all of gate_up's 16 candidates gave
//     one class; down's 24 gave two); the class is the one holding the shape's cached choices
//     (a tuning cache), else the one whose best member is nearest each probe's fastest (summed).
// Every M of the shape then runs a member of that class: Timed problems time the members at their
// M (as choose_timed times the heuristic's) together with the heuristic's own answers at that M
// that give the probe's rows the class's bits there (the probes' answers miss the small-M
// kernels: a lone request's GEMMs ran 6-16 % slower than without invariance, perf-log v29c),
// Heuristic ones take the member fastest at the nearest probe. No class: the shape keeps the usual
// choice per M, and start-up says so.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/gemm/gemm.h"
#include "engine/cuda/gemm/lt_helpers.h"
#include "model/bf16.h"

namespace clef::engine::cuda {
using namespace lt;
namespace {

// A served C1 request lands near 384 rows, a C16 pack near 7k; 8192 bounds the probe buffers.
constexpr std::array<int, 4> kProbeM = {384, 1024, 4096, 8192};
constexpr int kProbeRows = 64;        // the "request" compared across probes
constexpr int kGroupCandidates = 12;  // asked of the heuristic at each probe
constexpr int kGroupTimedRuns = 2;    // after the checked run

// Where the probe's request rows sit in an M-row probe problem: another offset at every M.
int probe_offset(int M) {
  return (M - kProbeRows) * 2 / 3;
}

// Whether a Timed problem's own M may add its heuristic answers to the class (own_candidates),
// unless CLEF_GEMM_OWN_CANDIDATES=0 (the A/B switch; read once).
bool own_candidates_allowed() {
  static const bool on = [] {
    const char* v = std::getenv("CLEF_GEMM_OWN_CANDIDATES");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

// n random values in t (bf16 or fp32), as bytes.
std::vector<unsigned char> random_values(DataType t, size_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<unsigned char> out(n * data_type_bytes(t));
  for (size_t i = 0; i < n; ++i) {
    const float x = g(rng);
    if (t == DataType::BF16) {
      const uint16_t b = model::float_to_bf16(x);
      std::memcpy(out.data() + 2 * i, &b, 2);
    } else {
      std::memcpy(out.data() + 4 * i, &x, 4);
    }
  }
  return out;
}

// A probe problem's buffers (the whole allocations a_all and c_all) zeroed, and the probe's A rows
// placed at row `off` of q's A (q.a.ptr, ld q.a.ld).
void place_probe_rows(void* a_all, size_t a_all_bytes, void* c_all, size_t c_all_bytes,
                      const GemmProblem& q, int off, const std::vector<unsigned char>& rows_a,
                      cudaStream_t s) {
  const size_t ea = data_type_bytes(q.a.dtype);
  CLEF_CUDA_CHECK(cudaMemsetAsync(a_all, 0, a_all_bytes, s));
  CLEF_CUDA_CHECK(cudaMemsetAsync(c_all, 0, c_all_bytes, s));
  CLEF_CUDA_CHECK(cudaMemcpy2DAsync(
      static_cast<char*>(const_cast<void*>(q.a.ptr)) + off * q.a.ld * ea, q.a.ld * ea,
      rows_a.data(), q.K * ea, q.K * ea, kProbeRows, cudaMemcpyHostToDevice, s));
}

}  // namespace

std::string Gemm::group_policy() {
  std::string probes;
  for (int m : kProbeM) probes += (probes.empty() ? "" : "/") + std::to_string(m);
  return "every M of a shape from one class of algorithms equal bit for bit at M " + probes + ", " +
         std::to_string(kGroupCandidates) + " candidates a probe" +
         (own_candidates_allowed() ? ", and each M's own candidates equal to the class there" : "");
}

size_t Gemm::invariant_groups() const {
  return static_cast<size_t>(std::count_if(groups_.begin(), groups_.end(),
                                           [](const auto& g) { return !g.second.algos.empty(); }));
}

size_t Gemm::variant_groups() const {
  return groups_.size() - invariant_groups();
}

bool Gemm::choose_group(const GemmProblem& p, Plan& pl, cudaStream_t s) {
  if (!batch_invariant_ || p.batch > 1 || scaled(p)) return false;
  Key k = key_of(p);
  k.v[1] = 0;  // M
  auto it = groups_.find(k);
  if (it == groups_.end()) {
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    CLEF_CUDA_CHECK(cudaStreamIsCapturing(s, &cap));
    if (cap != cudaStreamCaptureStatusNone) return false;  // nothing may run inside a capture
    it = groups_.emplace(k, select_group(p, pl.workspace, s)).first;
  }
  const Group& g = it->second;
  if (g.algos.empty()) return false;
  std::vector<cublasLtMatmulAlgo_t> here;  // the members that run at this M
  std::vector<size_t> index;
  for (size_t i = 0; i < g.algos.size(); ++i)
    if (accepts(pl, g.algos[i], pl.workspace)) here.push_back(g.algos[i]), index.push_back(i);
  if (here.empty()) {
    std::fprintf(stderr,
                 "clefserve: gemm %s: no algorithm of the shape's class runs at this M; "
                 "this M gets its own (not batch invariant)\n",
                 shape_text(p).c_str());
    return false;
  }
  if (p.tuning == GemmTuning::Timed) {
    const std::vector<cublasLtMatmulAlgo_t> own = own_candidates(p, pl, g, s);
    own_admitted_ += own.size();
    here.insert(here.end(), own.begin(), own.end());
    pl.algo = here[fastest(p, pl, here, s)];
  } else {  // the member fastest at the probe nearest this M (log scale)
    size_t probe = 0;
    for (size_t j = 1; j < kProbeM.size(); ++j)
      if (std::abs(std::log(double(p.M) / kProbeM[j])) <
          std::abs(std::log(double(p.M) / kProbeM[probe])))
        probe = j;
    size_t best = 0;
    for (size_t i = 1; i < here.size(); ++i)
      if (g.ms[index[i]][probe] < g.ms[index[best]][probe]) best = i;
    pl.algo = here[best];
  }
  return true;
}
Gemm::Group Gemm::select_group(const GemmProblem& p, size_t workspace, cudaStream_t s) {
  const bool heur = p.tuning == GemmTuning::Heuristic;
  const Alignments al = heur ? alignments_of(p) : Alignments{};

  // The candidates: every probe's first answers, each algorithm once.
  std::vector<cublasLtMatmulAlgo_t> cands;
  for (int M : kProbeM) {
    GemmProblem q = p;
    q.M = M;
    Plan d = make_descriptors(q);
    Preference pref(workspace);
    if (heur) pref.align(al);
    const std::vector<cublasLtMatmulAlgo_t> found = heuristic_algos(d, pref.p, kGroupCandidates);
    destroy(d);
    for (const cublasLtMatmulAlgo_t& a : found) {
      const bool seen = std::any_of(cands.begin(), cands.end(), [&](const auto& c) {
        return std::memcmp(&c, &a, sizeof c) == 0;
      });
      if (!seen) cands.push_back(a);
    }
  }

  // Probe buffers in the real layouts; a Heuristic problem's pointers keep its alignments.
  const size_t ea = data_type_bytes(p.a.dtype), ec = data_type_bytes(p.c_dtype);
  const int m_max = kProbeM.back();
  const size_t a_bytes = static_cast<size_t>(p.a.ld) * m_max * ea;
  const size_t c_bytes = static_cast<size_t>(p.ldc) * m_max * ec;
  // Probe buffers (up to ~1 GiB for the widest fp32 shape) come and go here; where the device has
  // no room left for them the shape keeps its choice per M rather than failing the start-up.
  DeviceBuffer a_buf, c_buf;
  try {
    a_buf.resize(a_bytes + 256);
    c_buf.resize(c_bytes + 256);
  } catch (const std::exception& e) {
    (void)cudaGetLastError();  // an allocation failure is not sticky; leave no error behind
    std::fprintf(stderr,
                 "clefserve: gemm N %d K %d: no device memory for the batch-invariance probes "
                 "(%s); this shape keeps a choice per M (not batch invariant)\n",
                 p.N, p.K, e.what());
    return {};
  }
  auto at = [](const DeviceBuffer& b, uint32_t align) {
    return b.get<char>() + (align > 0 && align < 256 ? align : 0);
  };
  char* a_ptr = at(a_buf, al.a);
  char* c_ptr = at(c_buf, al.c);
  std::mt19937 rng(0x5eed + p.N * 31 + p.K);  // fixed: the check is the same in every process
  const std::vector<unsigned char> rows_a =
      random_values(p.a.dtype, static_cast<size_t>(kProbeRows) * p.K, rng);
  const std::vector<unsigned char> rows_c =
      random_values(p.c_dtype, static_cast<size_t>(kProbeRows) * p.N, rng);
  std::vector<std::vector<unsigned char>> first(cands.size());
  std::vector<unsigned char> got;
  std::vector<bool> kept(cands.size(), true);
  std::vector<std::array<float, kProbeM.size()>> ms(cands.size());

  for (size_t j = 0; j < kProbeM.size(); ++j) {
    GemmProblem q = p;
    q.M = kProbeM[j];
    q.a.ptr = a_ptr;
    q.c = c_ptr;
    const int off = probe_offset(q.M);  // another row offset at every probe
    place_probe_rows(a_buf.get(), a_bytes + 256, c_buf.get(), c_bytes + 256, q, off, rows_a, s);
    Plan d = make_descriptors(q);
    for (size_t c = 0; c < cands.size(); ++c) {
      if (!kept[c]) continue;
      if (!accepts(d, cands[c], workspace) || !probe_rows(d, cands[c], q, off, rows_c, got, s)) {
        kept[c] = false;
        continue;
      }
      if (j == 0) {
        first[c] = got;
      } else if (got != first[c]) {
        kept[c] = false;  // this algorithm's rows depend on M or on where they sit
        continue;
      }
      ms[c][j] = time_ms(d, cands[c], q, c_ptr, kGroupTimedRuns, s);
      if (ms[c][j] < 0) kept[c] = false;
    }
    destroy(d);
  }

  // Classes of equal bits among the candidates kept.
  std::vector<int> cls(cands.size(), -1);
  int n_cls = 0;
  for (size_t c = 0; c < cands.size(); ++c) {
    if (!kept[c] || cls[c] >= 0) continue;
    for (size_t d = c; d < cands.size(); ++d)
      if (kept[d] && cls[d] < 0 && first[d] == first[c]) cls[d] = n_cls;
    ++n_cls;
  }
  // The class of the shape's cached choices, if a tuning cache holds any; else the one whose
  // best member at each probe is nearest that probe's fastest (summed over the probes).
  int chosen = -1;
  const TuningEntry::Shape mine = tuning_shape(p);
  for (const auto& [shape, algo] : preloaded_) {
    TuningEntry::Shape sh = shape;
    sh[0] = mine[0];  // M
    if (sh != mine) continue;
    for (size_t c = 0; c < cands.size() && chosen < 0; ++c)
      if (cls[c] >= 0 && std::memcmp(&cands[c], &algo, sizeof algo) == 0) chosen = cls[c];
    if (chosen >= 0) break;
  }
  if (chosen < 0) {
    std::array<float, kProbeM.size()> best;
    best.fill(1e30f);
    for (size_t c = 0; c < cands.size(); ++c)
      if (kept[c])
        for (size_t j = 0; j < kProbeM.size(); ++j) best[j] = std::min(best[j], ms[c][j]);
    double best_cost = 1e300;
    for (int k = 0; k < n_cls; ++k) {
      double cost = 0;
      for (size_t j = 0; j < kProbeM.size(); ++j) {
        float m = 1e30f;
        for (size_t c = 0; c < cands.size(); ++c)
          if (cls[c] == k) m = std::min(m, ms[c][j]);
        cost += m / std::max(best[j], 1e-6f);
      }
      if (cost < best_cost) best_cost = cost, chosen = k;
    }
  }
  Group g;
  for (size_t c = 0; c < cands.size(); ++c)
    if (chosen >= 0 && cls[c] == chosen) {
      if (g.algos.empty() && !heur) g.bits = first[c];
      g.algos.push_back(cands[c]);
      g.ms.emplace_back(ms[c].begin(), ms[c].end());
    }
  if (!g.algos.empty() && !heur) {  // for own_candidates (Timed problems only)
    g.rows_a = rows_a;
    if (p.accumulate) g.rows_c = rows_c;
  }
  if (!g.algos.empty())
    std::fprintf(stderr,
                 "clefserve: gemm %s: batch invariant, %zu algorithms of class %d of %d (%zu "
                 "candidates)\n",
                 shape_text(p).c_str(), g.algos.size(), chosen, n_cls, cands.size());
  else
    std::fprintf(stderr,
                 "clefserve: gemm N %d K %d: none of %zu cuBLASLt algorithms gives a row the same "
                 "bits at every M; this shape keeps a choice per M (not batch invariant)\n",
                 p.N, p.K, cands.size());
  return g;
}

bool Gemm::probe_rows(const Plan& d, const cublasLtMatmulAlgo_t& algo, const GemmProblem& q,
                      int off, const std::vector<unsigned char>& rows_c,
                      std::vector<unsigned char>& got, cudaStream_t s) {
  const size_t ec = data_type_bytes(q.c_dtype), out_row = static_cast<size_t>(q.N) * ec;
  char* c_rows = static_cast<char*>(q.c) + off * q.ldc * ec;
  if (q.accumulate)
    CLEF_CUDA_CHECK(cudaMemcpy2DAsync(c_rows, q.ldc * ec, rows_c.data(), out_row, out_row,
                                      kProbeRows, cudaMemcpyHostToDevice, s));
  if (launch(d, algo, q, q.c, s) != CUBLAS_STATUS_SUCCESS) return false;
  got.resize(out_row * kProbeRows);
  CLEF_CUDA_CHECK(cudaMemcpy2DAsync(got.data(), out_row, c_rows, q.ldc * ec, out_row, kProbeRows,
                                    cudaMemcpyDeviceToHost, s));
  CLEF_CUDA_CHECK(cudaStreamSynchronize(s));
  return true;
}

std::vector<cublasLtMatmulAlgo_t> Gemm::own_candidates(const GemmProblem& p, const Plan& pl,
                                                       const Group& g, cudaStream_t s) {
  std::vector<cublasLtMatmulAlgo_t> out;
  // The probe's rows must fit, and the buffers stay within the probes' own (M up to 8192).
  if (!own_candidates_allowed() || p.M < kProbeRows || p.M > kProbeM.back() || g.bits.empty() ||
      g.rows_a.empty())
    return out;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  CLEF_CUDA_CHECK(cudaStreamIsCapturing(s, &cap));
  if (cap != cudaStreamCaptureStatusNone) return out;  // nothing may run inside a capture
  Preference pref(pl.workspace);
  std::vector<cublasLtMatmulAlgo_t> fresh;
  for (const cublasLtMatmulAlgo_t& a : heuristic_algos(pl, pref.p, kGroupCandidates)) {
    const bool member = std::any_of(g.algos.begin(), g.algos.end(), [&](const auto& m) {
      return std::memcmp(&m, &a, sizeof a) == 0;
    });
    if (!member && accepts(pl, a, pl.workspace)) fresh.push_back(a);
  }
  if (fresh.empty()) return out;
  const size_t a_bytes = static_cast<size_t>(p.a.ld) * p.M * data_type_bytes(p.a.dtype);
  const size_t c_bytes = static_cast<size_t>(p.ldc) * p.M * data_type_bytes(p.c_dtype);
  DeviceBuffer a_buf, c_buf;
  try {
    a_buf.resize(a_bytes);
    c_buf.resize(c_bytes);
  } catch (const std::exception&) {
    (void)cudaGetLastError();  // no room: this M keeps the class's members only
    return out;
  }
  // The probe's request rows at this M's offset (as select_group places them), zeros around.
  GemmProblem q = p;
  q.a.ptr = a_buf.get();
  q.c = c_buf.get();
  const int off = probe_offset(p.M);
  place_probe_rows(a_buf.get(), a_bytes, c_buf.get(), c_bytes, q, off, g.rows_a, s);
  std::vector<unsigned char> got;
  for (const cublasLtMatmulAlgo_t& a : fresh)
    if (probe_rows(pl, a, q, off, g.rows_c, got, s) && got == g.bits) out.push_back(a);
  return out;
}

}  // namespace clef::engine::cuda

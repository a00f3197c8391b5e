// gdn_chunked(): checks the shapes and picks the tensor-core (gdn/tensor_core.h) or the SIMT
// (gdn/simt.h) path of the chunked gated delta rule (see gdn/gdn.h).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "engine/cuda/batch_invariance.h"
#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/gdn/simt.h"
#include "engine/cuda/gdn/tensor_core.h"
#include "engine/cuda/gdn/tiles.cuh"

namespace clef::engine::cuda {
namespace {

constexpr int C = kGdnChunk;
static_assert(C == gdn::kChunk, "one chunk size");

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

// The tensor-core path for these head dims (bf16 only, Auto only, where the device allows it).
bool use_tc(int dk, int dv, bool bf16, KernelPath path) {
  return bf16 && path == KernelPath::Auto && gdn::tc_supported(dk, dv);
}

}  // namespace

size_t gdn_workspace_bytes(int T, int Hv, int dk, int dv, int sequences) {
  const int Tc = gdn_chunk_slots(std::max(T, 1), std::max(sequences, 1)) * C;
  const size_t simt = gdn::simt_workspace_floats(Tc, Hv, dk, dv);
  const size_t tc = gdn::tc_supported(dk, dv) ? gdn::tc_workspace_floats(Tc, Hv, dk, dv) : 0;
  return sizeof(float) * std::max(simt, tc);
}

bool gdn_scan_output_by_default() {
  static const bool on = env_is("CLEF_GDN_SCAN_OUTPUT", "1");
  return on;
}

bool gdn_output_pairs_allowed() {
  static const bool on = !env_is("CLEF_GDN_OUTPUT_HEADS", "1");
  return on;
}

bool gdn_pdl_allowed() {
  static const bool on = !env_is("CLEF_GDN_PDL", "0");
  return on;
}

int gdn_scan_blocks(long long ctas, int sms, int sequences) {
  static const int forced = env_is("CLEF_GDN_SCAN_BLOCKS", "1")   ? 1
                            : env_is("CLEF_GDN_SCAN_BLOCKS", "2") ? 2
                                                                  : 0;
  if (forced) return forced;
  return sequences == 1 && ctas > sms ? 2 : 1;
}

bool gdn_longest_first() {
  static const bool on = !env_is("CLEF_GDN_LONGEST_FIRST", "0");
  return on;
}

int gdn_w_terms() {
  static const int terms = env_is("CLEF_GDN_W_TERMS", "1") ? 1 : 2;
  return terms;
}

int gdn_s_terms() {
  static const int terms = env_is("CLEF_GDN_S_TERMS", "1") ? 1 : 2;
  return terms;
}

int gdn_v_terms() {
  static const int terms = env_is("CLEF_GDN_V_TERMS", "1") ? 1 : 2;
  return terms;
}

bool gdn_scan_wide() {
  static const bool on = !env_is("CLEF_GDN_SCAN_NT", "4");
  return on;
}

bool gdn_scan_prefetch() {
  static const bool on = !env_is("CLEF_GDN_SCAN_PREFETCH", "0");
  return on;
}

bool gdn_scan_progress() {
  static const bool on = !env_is("CLEF_GDN_SCAN_PROGRESS", "0");
  return on;
}

bool gdn_scan_wgmma() {
  static const bool on = !env_is("CLEF_GDN_SCAN_WGMMA", "0");
  return on;
}

GdnFusedMode gdn_fused_mode() {
  // Unset: the three kernels under batch invariance (a lone request runs them), else per pack.
  static const GdnFusedMode mode = env_is("CLEF_GDN_FUSED", "1")      ? GdnFusedMode::On
                                   : env_is("CLEF_GDN_FUSED", "0")    ? GdnFusedMode::Off
                                   : env_is("CLEF_GDN_FUSED", "auto") ? GdnFusedMode::PerPack
                                   : batch_invariant()                ? GdnFusedMode::Off
                                                                      : GdnFusedMode::PerPack;
  return mode;
}

int gdn_fused_groups() {
  static const int groups = env_is("CLEF_GDN_FUSED_GROUPS", "4") ? 4 : 2;
  return groups;
}

bool gdn_fuses_gated_norm(int dk, int dv, bool bf16, KernelPath path) {
  return use_tc(dk, dv, bf16, path) &&
         !(gdn_scan_output_by_default() && gdn::tc_scan_output_supported(dk, dv));
}

bool gdn_takes_bf16_inputs(int dk, int dv, bool bf16, KernelPath path) {
  return use_tc(dk, dv, bf16, path);
}

const char* gdn_chunked_variant(int dk, int dv, bool bf16, KernelPath path) {
  return use_tc(dk, dv, bf16, path) ? "gdn_tensor_core" : "gdn_simt";
}

template <typename E>
void gdn_chunked(const GdnInputs& in, int T, int Hk, int Hv, int dk, int dv, E* o, void* workspace,
                 KernelPath path, cudaStream_t s, cudaEvent_t between, cudaEvent_t after_scan,
                 const GdnSequences* seqs, const GdnGatedNorm* norm, GdnOutputMode mode) {
  const bool tc = use_tc(dk, dv, std::is_same_v<E, __nv_bfloat16>, path);
  // The in-scan output where asked for (an error where it does not apply) or where the process's
  // default asks for it and it applies.
  const bool wants_in_scan = mode == GdnOutputMode::InScan ||
                             (mode == GdnOutputMode::Default && gdn_scan_output_by_default());
  const bool scan_output = wants_in_scan && tc && !norm && gdn::tc_scan_output_supported(dk, dv);
  if (mode == GdnOutputMode::InScan && !scan_output)
    throw std::invalid_argument(
        "gdn_chunked: the in-scan output needs the tensor-core path, no gated norm epilogue and "
        "the device's shared memory for it");
  if (norm) {
    if (!tc)
      throw std::invalid_argument(
          "gdn_chunked: the gated norm epilogue needs the tensor-core path");
    // the epilogue moves z and y as bf16 pairs and w as float pairs
    if (!norm->z || !norm->w || norm->ldz < Hv * dv || norm->ldz % 2 != 0 ||
        reinterpret_cast<uintptr_t>(norm->z) % 4 != 0 || reinterpret_cast<uintptr_t>(o) % 4 != 0 ||
        reinterpret_cast<uintptr_t>(norm->w) % 8 != 0)
      throw std::invalid_argument("gdn_chunked: bad gated norm operands");
  }
  if (tc ? !in.xq || !in.xk || !in.xv || !in.rq || !in.rk : !in.q || !in.k || !in.v)
    throw std::invalid_argument(tc ? "gdn_chunked: the tensor-core path takes the bf16 form of "
                                     "GdnInputs"
                                   : "gdn_chunked: the SIMT path takes the fp32 form of GdnInputs");
  if (!in.g || !in.beta) throw std::invalid_argument("gdn_chunked: g and beta are required");
  auto misaligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; };
  if (tc && (misaligned(in.xq) || misaligned(in.xk) || misaligned(in.xv)))
    throw std::invalid_argument("gdn_chunked: the bf16 inputs must be 16-byte aligned");
  if (T <= 0) return;
  if (seqs &&
      (!seqs->chunk_row0 || !seqs->chunk_valid || !seqs->seq_chunk0 || seqs->seq_slots < 1 ||
       seqs->chunk_slots < 1 || seqs->chunk_slots > gdn_chunk_slots(T, seqs->seq_slots)))
    throw std::invalid_argument("gdn_chunked: bad packed-sequence tables");
  if (dk > gdn::kMaxHeadDim || dv > gdn::kMaxHeadDim || dk < 1 || dv < 1)
    throw std::invalid_argument("gdn_chunked: head dims must be in [1, 128]");
  if (dk % 4 != 0 || dv % 4 != 0)
    throw std::invalid_argument("gdn_chunked: head dims must be multiples of 4");
  if (Hk <= 0 || Hv % Hk != 0)
    throw std::invalid_argument("gdn_chunked: Hv must be a multiple of Hk");
  float* ws = static_cast<float*>(workspace);
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    if (tc) {
      gdn::chunked_tc(in, T, Hk, Hv, dk, dv, o, ws, s, between, after_scan, seqs, norm,
                      scan_output);
      return;
    }
  }
  gdn::chunked_simt<E>(in.q, in.k, in.v, in.g, in.beta, T, Hk, Hv, dk, dv, o, ws, s, between,
                       after_scan, seqs);
}

template void gdn_chunked<float>(const GdnInputs&, int, int, int, int, int, float*, void*,
                                 KernelPath, cudaStream_t, cudaEvent_t, cudaEvent_t,
                                 const GdnSequences*, const GdnGatedNorm*, GdnOutputMode);
template void gdn_chunked<__nv_bfloat16>(const GdnInputs&, int, int, int, int, int, __nv_bfloat16*,
                                         void*, KernelPath, cudaStream_t, cudaEvent_t, cudaEvent_t,
                                         const GdnSequences*, const GdnGatedNorm*, GdnOutputMode);

}  // namespace clef::engine::cuda

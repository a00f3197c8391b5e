// The chunked gated delta rule (docs/spec/gpu.md §4, chunk 64, fp32 state), the GPU form of the
// exact sequential recurrence in docs/spec/model.md §3. The bf16 engine runs the tensor-core path
// of gdn/tensor_core.h where the head dims and the device allow it; otherwise (always in the
// float32 parity engine, and with KernelPath::Generic) the SIMT kernels of gdn/simt.h: a parallel
// one over (chunk, value head) that builds the UT transform Tm = (I + A)^-1 and
// W = Tm diag(beta e^gamma) K, U = Tm diag(beta) V, P = (Q K^T) o Gamma; then the only sequential
// kernel, over chunks, with the value columns split across CTAs so that a batch-1 prefill fills
// the GPU. Only non-positive log-decay differences are ever exponentiated.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/kernel_path.h"

namespace clef::engine::cuda {

constexpr int kGdnChunk = 64;

// Several sequences packed into the T rows (device arrays, filled by engine/cuda/packing.h):
// chunk slot c covers rows [chunk_row0[c], chunk_row0[c] + chunk_valid[c]) of ONE sequence, so no
// chunk straddles two (chunk_valid 0: an unused slot); sequence s owns the consecutive slots
// [seq_chunk0[s], seq_chunk0[s + 1]) and starts from a zero state. The grids are sized by
// chunk_slots and seq_slots, so one captured graph serves every packing that fits them. Without
// it (null): one sequence of T rows.
struct GdnSequences {
  const int32_t* chunk_row0 = nullptr;
  const int32_t* chunk_valid = nullptr;
  const int32_t* seq_chunk0 = nullptr;  // [seq_slots + 1]
  int chunk_slots = 0;                  // <= gdn_chunk_slots(T, seq_slots)
  int seq_slots = 0;
  // [1] where the core is chosen per pack (gdn_fused_mode() PerPack, gdn/core_choice.h): 1 the
  // fused core, 0 the three kernels. Both are launched (so one captured graph serves either) and
  // the kernels of the one not chosen exit at once. Null: chosen at launch.
  const int32_t* fused = nullptr;
};

// Chunk slots that any packing of `sequences` sequences into T rows needs at most.
constexpr int gdn_chunk_slots(int T, int sequences) {
  return (T + kGdnChunk - 1) / kGdnChunk + (sequences > 1 ? sequences - 1 : 0);
}

// Optional epilogue of the tensor-core path (bf16): the output buffer receives, instead of o,
// y[t, h, :] = (RMSNorm(o[t, h, :]) * w) * silu(z[t, h, :]) per (token, value head) over dv, with
// gated_rms_norm's rounding points (kernels/norm.h: o -> bf16, normalise in fp32 -> bf16, * w ->
// bf16, * silu(z) in fp32 -> bf16); only the order of the fp32 sum of squares differs. Saves the
// round trip of o through memory and a launch per layer.
struct GdnGatedNorm {
  const __nv_bfloat16* z = nullptr;  // head h of row t at z[t * ldz + h * dv] (4-byte aligned)
  int ldz = 0;                       // even
  const float* w = nullptr;          // [dv], 8-byte aligned
  float eps = 0.0f;
};

// Where the tensor-core path forms o = diag(e^gamma) Q S + P Vn. Kernel: a parallel output kernel
// after the scan, from the states the scan publishes to memory (the only mode with the gated norm
// epilogue). InScan: four more warps in every scan CTA form o a chunk behind the recurrence from
// the state and Vn in its shared memory (no published states, no output kernel; bit for bit the
// Kernel mode's o; needs gdn::tc_scan_output_supported). Default: InScan where the process was
// started with CLEF_GDN_SCAN_OUTPUT=1 (read once; the experiment's switch until the H200 says
// which is faster) and it applies (no gated norm, supported), else Kernel. The SIMT path has one
// mode; asking it for InScan is an error.
enum class GdnOutputMode { Default, Kernel, InScan };

// The family's A/B switches, each read from the environment once per process: whether
// CLEF_GDN_SCAN_OUTPUT=1 asks for GdnOutputMode::InScan by default, and whether the tensor-core
// output kernel may take a key head's two value heads in one CTA (unless CLEF_GDN_OUTPUT_HEADS=1,
// perf-log v18c).
bool gdn_scan_output_by_default();
bool gdn_output_pairs_allowed();
// Whether the tensor-core kernels are launched with programmatic edges on sm_90 (each starts while
// the one before it drains; the output kernel forms its P terms while a one-wave scan runs),
// unless CLEF_GDN_PDL=0 (perf-log v20a).
bool gdn_pdl_allowed();
// The scan's CTAs an SM for a grid of `ctas` over `sequences` sequence slots on `sms`
// multiprocessors: 2 (at most 128 registers a thread) where one sequence's grid would take more
// than one wave at one an SM (27B's 48 value heads: one wave instead of 1.45), else 1. A packed
// grid runs one an SM: an SM then steps as many CTAs a microsecond as with two, and the longest
// sequence's chain (often the scan's critical path in a served pack) steps twice as fast (H200,
// perf-log v22b). CLEF_GDN_SCAN_BLOCKS=1 or 2 forces it (perf-log v20a).
int gdn_scan_blocks(long long ctas, int sms, int sequences);
// Whether the tensor-core scan of a packed batch runs its sequences longest first (the grid's
// sequence blocks in order of chunk count, most first; ties in slot order), unless
// CLEF_GDN_LONGEST_FIRST=0 (perf-log v22a). The order never changes a value.
bool gdn_longest_first();
// W's bf16 terms in the scan's Vn = U - W S: 2 (W to ~2^-17, the default) or 1 (W rounded to
// bf16, as FLA's w: half the W bytes each scan CTA reads a chunk step) where the process was
// started with CLEF_GDN_W_TERMS=1 (perf-log v21b: the GDN stage only 2 % faster, tiny-r2's bf16
// max |dp| 0.0434 -> 0.0533, so two stays the default; the switch is for A/B runs).
int gdn_w_terms();
// The same for the chain's other two-term operands, for the precision budget of a fused core that
// would keep them in one bf16 term as FlashInfer does (perf-log v25a): the published state in
// Vn = U - W S (CLEF_GDN_S_TERMS=1) and diag(F) Vn in the state update (CLEF_GDN_V_TERMS=1).
int gdn_s_terms();
int gdn_v_terms();
// Whether a packed scan's value warps ask L2 for W and U two chunks ahead of their register loads
// (unless CLEF_GDN_SCAN_PREFETCH=0; one sequence never does; perf-log v25c). Never changes a value.
bool gdn_scan_prefetch();
// Whether a packed scan publishes its progress a chunk at a time, so that the output kernel's CTAs
// (started as soon as every scan CTA runs, in order of chunk index within their sequence) each wait
// for their own chunk's state and Vn instead of for the whole scan, and fill the SMs the scan's
// last wave and a long request's chain leave idle (unless CLEF_GDN_SCAN_PROGRESS=0; one sequence
// never does; perf-log v31a). Never changes a value.
bool gdn_scan_progress();
// Whether the scan runs its chain on warpgroup MMAs where gdn::scan_wgmma_supported (sm_90a,
// dk = 128), unless CLEF_GDN_SCAN_WGMMA=0 (perf-log v32a-d: the core 2-26 us a layer faster on an
// H100). Never changes a value: its sums run in the mma.sync scan's order (the GPU tests check
// the bits).
bool gdn_scan_wgmma();
// Whether a packed scan takes 64 value columns a CTA instead of 32 (unless CLEF_GDN_SCAN_NT=4;
// perf-log v25b). Never changes a value.
bool gdn_scan_wide();
// Which core a packed tensor-core grid runs where the fused core applies (prep's T' and P, then
// one kernel a (sequence, value head) to o; perf-log v26b-v28a): PerPack the one gdn_fused_pays
// picks for each pack (GdnSequences::fused; CLEF_GDN_FUSED=auto, and the default where batch
// invariance is off); Off the three kernels (CLEF_GDN_FUSED=0, and the default under batch
// invariance, batch_invariance.h); On the fused core (CLEF_GDN_FUSED=1). One sequence always runs
// the three kernels. The cores round differently: the choice changes the bits.
enum class GdnFusedMode { Off, On, PerPack };
GdnFusedMode gdn_fused_mode();
// The fused core's value-column groups: 4 (sixteen warps a CTA) where CLEF_GDN_FUSED_GROUPS=4,
// else 2. o has the same bits either way; y's row sums of squares are added in another order.
// Four measured 5-10 % slower than two (H100, perf-log v27a): an A/B switch, off.
int gdn_fused_groups();

// Whether gdn_chunked takes a GdnGatedNorm for these head dims (the tensor-core path runs, and the
// default output mode is not InScan: the engine then runs the separate gated norm).
bool gdn_fuses_gated_norm(int dk, int dv, bool bf16, KernelPath path);

// Scratch for either path (the larger of the two) for up to `sequences` packed sequences, fp32;
// SIMT: W [Hv, Tc, dk], U [Hv, Tc, dv], P [Hv, Tc, 64], gamma [Hv, Tc], Tc = 64 x chunk slots.
size_t gdn_workspace_bytes(int T, int Hv, int dk, int dv, int sequences = 1);

// The chunked rule's inputs in one of two forms (gdn_takes_bf16_inputs says which):
//  * fp32 (SIMT path): q, k [T, Hk, dk] (q l2-normalised and scaled, k l2-normalised), v [T, Hv,
//  dv];
//  * bf16 (tensor-core path): the conv + SiLU outputs xq, xk [T, Hk, dk], xv [T, Hv, dv] exactly
//    as the bf16 reference materialises them, with the per (token, key head) fp32 factors rq, rk
//    [T, Hk] such that q = xq rq and k = xk rk (gdn_conv_prep_bf16x). Products of bf16 values are
//    exact in fp32, so K K^T, Q K^T, Tm K and Tm V run on bf16 tensor cores at fp32 accuracy, and
//    the kernels read half the bytes.
//  g (log decay), beta: [T, Hv] fp32 in both forms.
struct GdnInputs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const __nv_bfloat16* xq = nullptr;
  const __nv_bfloat16* xk = nullptr;
  const __nv_bfloat16* xv = nullptr;
  const float* rq = nullptr;
  const float* rk = nullptr;
  const float* g = nullptr;
  const float* beta = nullptr;
};

// Whether gdn_chunked wants the bf16 form of GdnInputs for these head dims (the tensor-core path
// runs) or the fp32 form.
bool gdn_takes_bf16_inputs(int dk, int dv, bool bf16, KernelPath path);

// o: [T, Hv, dv] in E. Value head h reads key head h / (Hv / Hk). dk, dv <= 128. `between` and
// `after_scan` (optional, profiling) are recorded on s after the parallel prep kernel and after
// the sequential scan. `seqs` (optional): the packed sequences of the T rows. `norm` (optional,
// only where gdn_fuses_gated_norm): o receives the gated norm's y instead. mode: GdnOutputMode
// (InScan: `after_scan` is recorded after the scan, which is then the end).
template <typename E>
void gdn_chunked(const GdnInputs& in, int T, int Hk, int Hv, int dk, int dv, E* o, void* workspace,
                 KernelPath path, cudaStream_t s, cudaEvent_t between = nullptr,
                 cudaEvent_t after_scan = nullptr, const GdnSequences* seqs = nullptr,
                 const GdnGatedNorm* norm = nullptr, GdnOutputMode mode = GdnOutputMode::Default);

// The path gdn_chunked runs for these head dims on the current device: "gdn_tensor_core" (bf16,
// KernelPath::Auto, gdn::tc_supported) or "gdn_simt".
const char* gdn_chunked_variant(int dk, int dv, bool bf16, KernelPath path);

}  // namespace clef::engine::cuda

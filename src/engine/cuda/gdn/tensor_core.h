// Tensor-core path of the chunked gated delta rule (bf16 engine), in the FLA layout: a parallel
// kernel per (chunk, value head) builds the UT transform (blockwise 16x16 inverse), W, U and the
// decayed keys' row factors; the only sequential kernel carries the fp32 state across chunks with
// value columns split over CTAs, keeping the state in registers and publishing it per chunk; a
// second parallel kernel forms the outputs from the published states. Every product runs on bf16
// tensor cores with the conv outputs exact and fp32 operands split into bf16 terms
// (gdn/bf16_split.cuh): three terms (fp32 accuracy) in the prep's W and U, two (~2^-17) in the
// scan and in the output kernel's P; the inverse's off-diagonal blocks are 3xTF32. The scan
// publishes the states and Vn to the output kernel rounded to bf16 (as FLA's h and v_new): o feeds
// nothing sequential and is itself bf16, and those bytes bound the scan's step (perf-log v21a).
// State and sums stay fp32. gdn_chunked() dispatches here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/cuda/gdn/gdn.h"

namespace clef::engine::cuda::gdn {

// dk, dv multiples of 16 and at most 128, and the current device grants the kernels' shared memory
// (at most ~56 KiB per block).
bool tc_supported(int dk, int dv);

// The fused core (packs only, as gdn_fused_mode() says; perf-log v26a-v28a): dk = dv = 128, the
// tensor-core path, and the device grants its ~195 KiB of shared memory per block.
bool fused_supported(int dk, int dv);

// The scan's chain on warpgroup MMAs (TcLaunch::scan_wgmma, gdn_scan_wgmma()): dk = 128,
// dv % 32 == 0, an sm_90 device (the binary's sm_90a code) that grants its shared memory.
bool scan_wgmma_supported(int dk, int dv);

// tc_supported, and the device grants the scan that also forms o its 186.5 KiB (dv % 32 == 0) or
// 146.5 KiB per block (dv % 32 == 16) (gdn.h GdnOutputMode::InScan).
bool tc_scan_output_supported(int dk, int dv);

// Floats of scratch for Tc (= T rounded up to 64) rows: W, U, the decayed keys' row factors, gamma,
// the per-chunk states and the corrected values Vn (those two in bf16, for the output kernel).
size_t tc_workspace_floats(int Tc, int Hv, int dk, int dv);

#ifdef CLEF_GDN_PHASE_CLOCKS
// Diagnostic build: mean cycles of each phase since the last call, then reset: per block for prep
// (0..6) and output (8..12), per CTA and chunk step for the scan (value warp 16..22, state warp
// 23..27).
std::vector<double> phase_cycles();
#endif

// How chunked_tc launches (every choice gives the same bits): programmatic edges (pdl: -1 the
// process's gdn_pdl_allowed, 0 off, 1 on where the device has them) and the scan's CTAs an SM
// (scan_blocks: 0 the process's gdn_scan_blocks, else 1 or 2; the in-scan output always 1). And
// W's terms in the scan (w_terms: 0 the process's gdn_w_terms, else 1 or 2; this one changes the
// bits).
struct TcLaunch {
  int pdl = -1;
  int scan_blocks = 0;
  int w_terms = 0;
  int longest_first = -1;  // the scan's sequence order: -1 gdn_longest_first(), 0 slot order, 1 on
  int s_terms = 0;  // the published state's terms in W S: 0 gdn_s_terms(), else 1 or 2 (bits)
  int v_terms = 0;  // diag(F) Vn's terms in the state update: 0 gdn_v_terms(), else 1 or 2 (bits)
  // the scan's n8 column tiles a CTA for a packed grid at one CTA an SM: 0 the process's choice
  // (8 unless CLEF_GDN_SCAN_NT=4), 4 or 8 (the same bits either way)
  int scan_nt = 0;
  // the fused core (fused_kernel): 0 the process's choice (gdn_fused_mode()), 1 on where
  // fused_supported, -1 off, 2 per pack where GdnSequences::fused is set (both cores launched,
  // the device flag picks; changes the bits)
  int fused = 0;
  // the fused core's column groups: 0 the process's choice (4 where CLEF_GDN_FUSED_GROUPS=4, else
  // 2), 2 (eight warps) or 4 (sixteen warps): o the same bits, y's row sums of squares added in
  // another order
  int fused_groups = 0;
  // a packed scan's progress counts, the output CTAs each waiting for their own chunk: 0 the
  // process's choice (gdn_scan_progress()), 1 on, -1 off; where they apply (programmatic edges,
  // no profiling events, the three kernels, several sequences). The same bits either way.
  int progress = 0;
  // the scan's chain on warpgroup MMAs: 0 the process's choice (gdn_scan_wgmma()), 1 on where
  // scan_wgmma_supported (one CTA an SM, 32 or 64 columns, not the in-scan output, every lo
  // term), -1 off. The same bits either way.
  int scan_wgmma = 0;
  // where not null, set to whether the scan ran on warpgroup MMAs (what the tests check ran)
  bool* scan_wgmma_ran = nullptr;
};

// The sequence slot each block z of a packed scan grid takes when it runs longest first (ChunkMap::
// longest_first on the device, for seq_slots = seq_chunk0.size() - 1): what the GDN tests check
// against a stable sort by chunk count.
std::vector<int> scan_sequence_order(const std::vector<int32_t>& seq_chunk0);

// The chunk's inclusive prefix sums of 64 log-decays as the prep kernels form them on the device
// (chunk_cumsum, gdn/tiles.cuh): what the GDN tests check for causality (prefix i reads g[0..i]
// only) and against a double-precision sum. g: 64 values.
std::vector<float> chunk_prefix_sums(const std::vector<float>& g);

// Same contract as gdn_chunked() (gdn/gdn.h) with the bf16 form of GdnInputs; with `norm`, the
// output kernel's epilogue writes the gated RMSNorm of o instead of o. scan_output (no `norm`,
// tc_scan_output_supported): the scan forms o itself (GdnOutputMode::InScan), bit for bit the
// output kernel's o; `after_scan` is then recorded at the end. `launch`: see TcLaunch.
void chunked_tc(const GdnInputs& in, int T, int Hk, int Hv, int dk, int dv, __nv_bfloat16* o,
                float* workspace, cudaStream_t s, cudaEvent_t between, cudaEvent_t after_scan,
                const GdnSequences* seqs, const GdnGatedNorm* norm = nullptr,
                bool scan_output = false, TcLaunch launch = {});

}  // namespace clef::engine::cuda::gdn

// Which GDN core a packed forward runs where the process picks per pack (CLEF_GDN_FUSED=auto,
// gdn.h GdnFusedMode::PerPack): the three kernels (prep, the scan at 64 value columns a CTA, the
// output kernel) or the fused core (prep's T' and P, then one CTA a (sequence, value head) walking
// its chunks). The fused core's chunk is slower than the scan's step (perf-log v26b: ~9.5 against
// ~3.8 us), its prep cheaper and it has no output kernel: it wins on packs of many mid-length
// requests and loses on a pack whose one long request's chain bounds the grid. Each core's time a
// layer is estimated from the pack's chunk counts: a part proportional to its chunk-heads (the
// chunk-parallel kernels) plus the makespan of its sequential CTAs dispatched longest first over
// the SMs at one CTA an SM (as ChunkMap::longest_first orders them). Host code only.
#pragma once

#include <cstdint>
#include <vector>

namespace clef::engine::cuda {

// Fitted to workbench_gdn on the H100 (perf-log v27: 1000x7, 330x28, 5000+300x6,
// 2000+1000x4+500x6), microseconds a layer.
struct GdnCoreCosts {
  double three_per_chunk_head_us = 0.095;  // prep + output kernel, a (chunk, value head)
  double scan_step_us = 3.8;               // a 64-column scan CTA's chunk step
  int scan_ctas_per_head = 2;              // 128 value columns, 64 a CTA
  double fused_per_chunk_head_us = 0.034;  // the fused core's prep, a (chunk, value head)
  double fused_chunk_us = 9.5;             // a fused CTA's chunk
};

// The defaults, with fused_chunk_us from CLEF_GDN_FUSED_CHUNK_US where set (for an A/B of another
// fused form).
GdnCoreCosts gdn_core_costs();

// Chunks of each sequence of a pack, from its GdnSequences::seq_chunk0 (sequence s owns chunks
// [seq_chunk0[s], seq_chunk0[s + 1]); empty slots give 0).
std::vector<int> gdn_sequence_chunks(const std::vector<int32_t>& seq_chunk0);

// Makespan in chunk steps of `per_seq` CTAs for each sequence, one of chunks[s] steps, dispatched
// longest first onto `sms` slots (each CTA to the slot that frees first).
long long longest_first_makespan(const std::vector<int>& chunks, int per_seq, int sms);

// Estimated microseconds a layer of either core for a pack of chunks[s] chunks a sequence.
double gdn_three_kernel_us(const std::vector<int>& chunks, int Hv, int sms, const GdnCoreCosts& k);
double gdn_fused_core_us(const std::vector<int>& chunks, int Hv, int sms, const GdnCoreCosts& k);

// Whether the fused core's estimate is the lower for the pack whose GdnSequences::seq_chunk0 is
// given.
bool gdn_fused_pays(const std::vector<int32_t>& seq_chunk0, int Hv, int sms, const GdnCoreCosts& k);

}  // namespace clef::engine::cuda

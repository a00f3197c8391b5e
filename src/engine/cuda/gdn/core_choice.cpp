#include "engine/cuda/gdn/core_choice.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <queue>

namespace clef::engine::cuda {

GdnCoreCosts gdn_core_costs() {
  GdnCoreCosts k;
  if (const char* v = std::getenv("CLEF_GDN_FUSED_CHUNK_US")) {
    const double us = std::atof(v);
    if (us > 0) k.fused_chunk_us = us;
  }
  return k;
}

std::vector<int> gdn_sequence_chunks(const std::vector<int32_t>& seq_chunk0) {
  std::vector<int> chunks;
  for (size_t s = 0; s + 1 < seq_chunk0.size(); ++s)
    chunks.push_back(seq_chunk0[s + 1] - seq_chunk0[s]);
  return chunks;
}

long long longest_first_makespan(const std::vector<int>& chunks, int per_seq, int sms) {
  std::vector<int> order(chunks);
  std::sort(order.begin(), order.end(), std::greater<>());
  // Each slot's finishing time; a CTA goes to the slot that frees first.
  std::priority_queue<long long, std::vector<long long>, std::greater<>> free_at;
  for (int i = 0; i < std::max(sms, 1); ++i) free_at.push(0);
  long long span = 0;
  for (int n : order) {
    if (n <= 0) continue;
    for (int c = 0; c < per_seq; ++c) {
      const long long end = free_at.top() + n;
      free_at.pop();
      free_at.push(end);
      span = std::max(span, end);
    }
  }
  return span;
}

namespace {
long long chunk_heads(const std::vector<int>& chunks, int Hv) {
  long long n = 0;
  for (int c : chunks) n += std::max(c, 0);
  return n * Hv;
}
}  // namespace

double gdn_three_kernel_us(const std::vector<int>& chunks, int Hv, int sms, const GdnCoreCosts& k) {
  return k.three_per_chunk_head_us * static_cast<double>(chunk_heads(chunks, Hv)) +
         k.scan_step_us *
             static_cast<double>(longest_first_makespan(chunks, k.scan_ctas_per_head * Hv, sms));
}

double gdn_fused_core_us(const std::vector<int>& chunks, int Hv, int sms, const GdnCoreCosts& k) {
  return k.fused_per_chunk_head_us * static_cast<double>(chunk_heads(chunks, Hv)) +
         k.fused_chunk_us * static_cast<double>(longest_first_makespan(chunks, Hv, sms));
}

bool gdn_fused_pays(const std::vector<int32_t>& seq_chunk0, int Hv, int sms,
                    const GdnCoreCosts& k) {
  const std::vector<int> chunks = gdn_sequence_chunks(seq_chunk0);
  return gdn_fused_core_us(chunks, Hv, sms, k) < gdn_three_kernel_us(chunks, Hv, sms, k);
}

}  // namespace clef::engine::cuda

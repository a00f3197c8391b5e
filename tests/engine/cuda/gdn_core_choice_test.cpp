// The per-pack GDN core choice (gdn/core_choice.h; host code): the longest-first makespan on hand
// cases, and the choice on the packs whose two cores workbench_gdn timed on the H100 (perf-log
// v26b: µs a layer, three kernels / fused: 1000x7 578.0 / 428.4, 330x28 809.4 / 581.7,
// 2000+1000x4+500x6 695.1 / 531.0, 5000+300x6 615.7 / 839.7), each estimate within 10 % of
// its measurement.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/cuda/gdn/core_choice.h"
#include "engine/cuda/packing.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;

TEST(GdnCoreChoice, LongestFirstMakespanOnHandCases) {
  // Three CTAs of 3 on two slots: 3 + 3 on one.
  EXPECT_EQ(longest_first_makespan({3, 3, 3}, 1, 2), 6);
  // 5 on one slot, the five 1s on the other.
  EXPECT_EQ(longest_first_makespan({1, 1, 5, 1, 1, 1}, 1, 2), 5);
  // Two CTAs a sequence: 4 4 | 2 2 on two slots -> 4 + 2 each.
  EXPECT_EQ(longest_first_makespan({2, 4}, 2, 2), 6);
  // Empty slots (0 chunks) and more slots than CTAs.
  EXPECT_EQ(longest_first_makespan({0, 7, 0}, 3, 8), 7);
  EXPECT_EQ(longest_first_makespan({}, 4, 8), 0);
}

std::vector<int32_t> seq_chunk0_of(const std::vector<int>& lengths) {
  int T = 0;
  for (int L : lengths) T += L;
  return pack_tables(lengths, T, sequence_bucket(static_cast<int>(lengths.size())), 64).seq_chunk0;
}

std::vector<int> chunks_of(const std::vector<int>& lengths) {
  std::vector<int> c;
  for (int L : lengths) c.push_back((L + 63) / 64);
  return c;
}

TEST(GdnCoreChoice, PicksTheFasterCoreOnMeasuredPacks) {
  struct Case {
    std::string name;
    std::vector<int> lengths;
    double three_us, fused_us;  // workbench_gdn, H100 (perf-log v26b)
  };
  std::vector<int> l1000x7(7, 1000), l330x28(28, 330), mixed{2000}, long_short{5000};
  for (int i = 0; i < 4; ++i) mixed.push_back(1000);
  for (int i = 0; i < 6; ++i) mixed.push_back(500), long_short.push_back(300);
  const Case cases[] = {{"1000x7", l1000x7, 578.0, 428.4},
                        {"330x28", l330x28, 809.4, 581.7},
                        {"2000+1000x4+500x6", mixed, 695.1, 531.0},
                        {"5000+300x6", long_short, 615.7, 839.7}};
  const GdnCoreCosts k;
  const int Hv = 32, sms = 132;  // Qwen3.5-9B's value heads, the H100's SMs
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // Each sequence's chunks, then 0 for the sequence bucket's unused slots.
    const std::vector<int32_t> seq0 = seq_chunk0_of(c.lengths);
    std::vector<int> want = chunks_of(c.lengths);
    want.resize(seq0.size() - 1, 0);
    EXPECT_EQ(gdn_sequence_chunks(seq0), want);
    const double t3 = gdn_three_kernel_us(chunks_of(c.lengths), Hv, sms, k);
    const double tf = gdn_fused_core_us(chunks_of(c.lengths), Hv, sms, k);
    EXPECT_LT(std::fabs(t3 / c.three_us - 1.0), 0.10) << "three kernels: estimate " << t3;
    EXPECT_LT(std::fabs(tf / c.fused_us - 1.0), 0.10) << "fused core: estimate " << tf;
    EXPECT_EQ(gdn_fused_pays(seq0, Hv, sms, k), c.fused_us < c.three_us);
  }
}

}  // namespace
}  // namespace clef

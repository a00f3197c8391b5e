// Nearest-rank percentile math on inputs whose answers are known by hand.
#include <gtest/gtest.h>

#include "bench/stats.h"

namespace clef::bench {
namespace {

TEST(NearestRank, TextbookExample) {
  // The classic five-value example: ranks ceil(p/100 * 5).
  const std::vector<double> v{15, 20, 35, 40, 50};
  EXPECT_EQ(*nearest_rank(v, 5), 15);
  EXPECT_EQ(*nearest_rank(v, 30), 20);
  EXPECT_EQ(*nearest_rank(v, 40), 20);
  EXPECT_EQ(*nearest_rank(v, 50), 35);
  EXPECT_EQ(*nearest_rank(v, 95), 50);
  EXPECT_EQ(*nearest_rank(v, 100), 50);
}

TEST(NearestRank, UnsortedInputAndExactRanks) {
  std::vector<double> v;
  for (int i = 20; i >= 1; --i) v.push_back(i);  // 20..1
  EXPECT_EQ(*nearest_rank(v, 50), 10);           // rank 10
  EXPECT_EQ(*nearest_rank(v, 95), 19);           // rank 19 exactly, not 20
  std::vector<double> h;
  for (int i = 1; i <= 100; ++i) h.push_back(101 - i);
  EXPECT_EQ(*nearest_rank(h, 50), 50);
  EXPECT_EQ(*nearest_rank(h, 95), 95);
  EXPECT_EQ(*nearest_rank(h, 99.5), 100);
}

TEST(NearestRank, NeverInterpolates) {
  const std::vector<double> v{1, 2, 3, 4};
  EXPECT_EQ(*nearest_rank(v, 50), 2);  // an interpolating median would say 2.5
  EXPECT_EQ(*nearest_rank(v, 95), 4);
  EXPECT_EQ(*nearest_rank({7.5}, 50), 7.5);
  EXPECT_EQ(*nearest_rank({7.5}, 95), 7.5);
}

TEST(NearestRank, EmptyHasNoPercentile) {
  EXPECT_FALSE(nearest_rank({}, 50).has_value());
  const LatencySummary s = summarize({});
  EXPECT_EQ(s.count, 0u);
  EXPECT_FALSE(s.p50 || s.p95 || s.mean || s.max);
}

TEST(Summarize, MeanMaxAndPercentiles) {
  const LatencySummary s = summarize({10, 30, 20, 40});
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(*s.mean, 25.0);
  EXPECT_EQ(*s.max, 40);
  EXPECT_EQ(*s.min, 10);
  EXPECT_EQ(*s.p50, 20);
  EXPECT_EQ(*s.p95, 40);
}

}  // namespace
}  // namespace clef::bench

#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace clef::bench {

std::optional<double> nearest_rank(std::vector<double> values, double p) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  // Rank computed in long double so p = 95 on n = 20 gives exactly rank 19, not 19.000000000000004.
  const long double exact = static_cast<long double>(p) / 100.0L * static_cast<long double>(n);
  auto rank = static_cast<long long>(std::ceil(exact - 1e-12L));
  rank = std::clamp<long long>(rank, 1, static_cast<long long>(values.size()));
  return values[static_cast<size_t>(rank - 1)];
}

LatencySummary summarize(const std::vector<double>& values) {
  LatencySummary s;
  s.count = values.size();
  if (values.empty()) return s;
  s.p50 = nearest_rank(values, 50);
  s.p95 = nearest_rank(values, 95);
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.max = *std::max_element(values.begin(), values.end());
  s.min = *std::min_element(values.begin(), values.end());
  return s;
}

}  // namespace clef::bench

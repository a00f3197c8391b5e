// Latency statistics of docs/spec/benchmark.md: nearest-rank percentiles, mean and max over
// successful requests.
#pragma once

#include <optional>
#include <vector>

namespace clef::bench {

// Nearest-rank percentile: the smallest value such that at least p% of the values are <= it, i.e.
// sorted[ceil(p/100 * n) - 1] (p in (0, 100]; p = 0 gives the minimum). nullopt for no values.
std::optional<double> nearest_rank(std::vector<double> values, double p);

struct LatencySummary {
  size_t count = 0;
  std::optional<double> p50, p95, mean, max, min;
};

LatencySummary summarize(const std::vector<double>& values);

}  // namespace clef::bench

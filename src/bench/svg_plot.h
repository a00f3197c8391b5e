// DIR/latency.svg: a latency CDF and latency against input tokens, side by side, with axes, ticks,
// units and labels, so a report can be read at a glance (docs/spec/benchmark.md).
#pragma once

#include <string>
#include <vector>

namespace clef::bench {

struct LatencyPoint {
  double latency_ms = 0.0;
  double input_tokens = -1.0;  // < 0: unknown (left out of the scatter)
  std::string tier;
};

// `title` heads the figure; `subtitle` (e.g. clock name and counts) goes below it.
std::string latency_svg(const std::vector<LatencyPoint>& points, const std::string& title,
                        const std::string& subtitle);

// Tick values covering [lo, hi] with a 1/2/5 x 10^k step (about `target` of them).
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

}  // namespace clef::bench

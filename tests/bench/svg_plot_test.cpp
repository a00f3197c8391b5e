// The latency plot is a well-formed SVG with both panels, axes, units and tick labels.
#include <gtest/gtest.h>

#include "bench/svg_plot.h"

namespace clef::bench {
namespace {

TEST(NiceTicks, OneTwoFiveSteps) {
  EXPECT_EQ(nice_ticks(0, 100), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  const auto unit = nice_ticks(0, 1);
  ASSERT_EQ(unit.size(), 6u);
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_NEAR(unit[i], 0.2 * i, 1e-12);
  const auto t = nice_ticks(0, 4925);
  EXPECT_EQ(t.front(), 0);
  EXPECT_EQ(t[1] - t[0], 1000);
}

TEST(LatencySvg, HasBothPanelsWithAxesAndUnits) {
  std::vector<LatencyPoint> pts;
  for (int i = 1; i <= 50; ++i) pts.push_back({10.0 * i, 100.0 * i, i % 2 ? "easy" : "hard"});
  const std::string svg = latency_svg(pts, "title <x>", "sub");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("Latency CDF"), std::string::npos);
  EXPECT_NE(svg.find("Latency vs input tokens"), std::string::npos);
  EXPECT_NE(svg.find("latency (ms)"), std::string::npos);
  EXPECT_NE(svg.find("input tokens"), std::string::npos);
  EXPECT_NE(svg.find("p50 = 250.0 ms"), std::string::npos);  // nearest rank 25 of 10..500
  EXPECT_NE(svg.find("p95 = 480.0 ms"), std::string::npos);
  EXPECT_NE(svg.find("title &lt;x&gt;"), std::string::npos);
  EXPECT_NE(svg.find("tier easy"), std::string::npos);
  // CDF axis labels keep their exact values (0.25 must not print as 0.2).
  for (const char* label : {">0.25<", ">0.50<", ">0.75<", ">1.00<", ">100<", ">5000<"})
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '<') - std::count(svg.begin(), svg.end(), '>'), 0);
}

TEST(LatencySvg, EmptyRunSaysSo) {
  const std::string svg = latency_svg({}, "t", "s");
  EXPECT_NE(svg.find("no successful requests"), std::string::npos);
}

}  // namespace
}  // namespace clef::bench

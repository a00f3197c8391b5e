// The bench's reading of the server's batch counters (bench/server_batches.h) on text rendered by
// the server's own Metrics (two devices, as `--device cuda:all` renders them), and on damaged text.
#include <gtest/gtest.h>

#include "bench/server_batches.h"
#include "server/metrics.h"

namespace clef::bench {
namespace {

using Json = nlohmann::ordered_json;

TEST(ServerBatches, WindowOverTwoDevicesFromTheServersOwnText) {
  server::Metrics m({"cuda:0", "cuda:1"});
  m.observe_batch(0, 3, 900, 0.5);  // before the window
  const BatchCounters before = parse_batch_counters(m.render({}));
  m.observe_batch(0, 1, 100, 0.25);
  m.observe_batch(1, 2, 300, 0.125);
  m.observe_batch(1, 5, 1000, 0.5);
  m.observe_batch(0, 40, 8000, 1.0);
  const BatchCounters after = parse_batch_counters(m.render({}));
  ASSERT_TRUE(before.found);
  ASSERT_TRUE(after.found);
  EXPECT_EQ(before.forwards, 1);
  EXPECT_EQ(after.forwards, 5);
  EXPECT_EQ(after.requests, 51);
  EXPECT_EQ(after.tokens, 10300);

  const Json w = batch_window_json(before, after);
  EXPECT_EQ(w["forwards"].get<double>(), 4);
  EXPECT_EQ(w["requests"].get<double>(), 48);
  EXPECT_EQ(w["tokens"].get<double>(), 9400);
  EXPECT_DOUBLE_EQ(w["mean_requests_per_forward"].get<double>(), 12.0);
  EXPECT_DOUBLE_EQ(w["mean_tokens_per_forward"].get<double>(), 2350.0);
  EXPECT_DOUBLE_EQ(w["forward_seconds"].get<double>(), 1.875);
  // Cumulative over both devices: batches of 1, 2, 5 and 40 requests.
  std::map<std::string, double> at;
  for (const auto& h : w["forwards_with_at_most"])
    at[h["le"].is_string() ? h["le"].get<std::string>() : Json(h["le"]).dump()] = h["forwards"];
  EXPECT_EQ(at["1.0"], 1);
  EXPECT_EQ(at["2.0"], 2);
  EXPECT_EQ(at["4.0"], 2);
  EXPECT_EQ(at["8.0"], 3);
  EXPECT_EQ(at["32.0"], 3);
  EXPECT_EQ(at["+Inf"], 4);
  EXPECT_EQ(w["forwards_with_at_most"].back()["le"], "+Inf");

  // A server restarted between the readings starts its counters again: no negative window.
  server::Metrics restarted({"cuda:0", "cuda:1"});
  restarted.observe_batch(1, 2, 300, 0.125);
  const Json back = batch_window_json(after, parse_batch_counters(restarted.render({})));
  EXPECT_TRUE(back.contains("error"));
  EXPECT_FALSE(back.contains("forwards"));
}

TEST(ServerBatches, DamagedOrForeignTextIsSkippedNotFatal) {
  const std::string text =
      "# HELP clef_batch_size_requests x\n"
      "clef_batch_size_requests_count{device=\"cpu\"} 7\n"
      "clef_batch_size_requests_sum{device=\"cpu\"} 9\n"
      "clef_batch_size_requests_sum{device=\"cpu\"} not-a-number\n"
      "clef_batch_size_requests_bucket{device=\"cpu\",le=\"1\"} 5\n"
      "clef_batch_size_requests_bucket{device=\"cpu\",le=\"oops\"} 5\n"
      "clef_batch_size_requests_bucket{device=\"cpu\"} 3\n"
      "clef_batch_size_tokens_sum{device=\"cpu\"} +Inf\n"
      "other_metric{le=\"1\"} 100\n"
      "garbage\n"
      "\n";
  const BatchCounters c = parse_batch_counters(text);
  EXPECT_TRUE(c.found);
  EXPECT_EQ(c.forwards, 7);
  EXPECT_EQ(c.requests, 9);
  EXPECT_EQ(c.tokens, 0);  // an infinite sum is no reading
  ASSERT_EQ(c.requests_le.size(), 1u);
  EXPECT_EQ(c.requests_le.at(1.0), 5);

  EXPECT_FALSE(parse_batch_counters("").found);
  EXPECT_FALSE(parse_batch_counters("clef_requests_total 3\n").found);
  const Json w = batch_window_json(parse_batch_counters(""), c);
  EXPECT_TRUE(w.contains("error"));
  EXPECT_FALSE(w.contains("forwards"));
}

}  // namespace
}  // namespace clef::bench

// The Server-Timing parser on headers whose metrics are known by hand: the shape clefserve sends,
// other servers' shapes (desc, no dur, odd spacing), and garbage that must be skipped, never
// thrown.
#include <gtest/gtest.h>

#include "bench/server_timing.h"

namespace clef::bench {
namespace {

using Metrics = std::map<std::string, double>;

TEST(ServerTiming, ClefserveShape) {
  EXPECT_EQ(parse_server_timing("queue;dur=0.012, forward;dur=11.032, total;dur=11.456"),
            (Metrics{{"queue", 0.012}, {"forward", 11.032}, {"total", 11.456}}));
}

TEST(ServerTiming, AnyOrderExtraMetricsAndSpacing) {
  EXPECT_EQ(parse_server_timing(" total ; dur = 7.5 ,encode;dur=0.25,\tforward;dur=6 ,queue;dur=0"),
            (Metrics{{"total", 7.5}, {"encode", 0.25}, {"forward", 6.0}, {"queue", 0.0}}));
  EXPECT_EQ(parse_server_timing("total;dur=3"), (Metrics{{"total", 3.0}}));
  EXPECT_EQ(parse_server_timing("total;dur=3,"), (Metrics{{"total", 3.0}}));
  EXPECT_EQ(parse_server_timing(",, total;dur=3 ,,"), (Metrics{{"total", 3.0}}));
  EXPECT_EQ(parse_server_timing("total;DUR=3"), (Metrics{{"total", 3.0}}));  // names: any case
  EXPECT_EQ(parse_server_timing("total;dur=1e1"), (Metrics{{"total", 10.0}}));
}

TEST(ServerTiming, DescAndOtherParametersAreSkipped) {
  EXPECT_EQ(parse_server_timing(R"(db;desc="Database";dur=53.2, app;dur=47.2;desc=app)"),
            (Metrics{{"db", 53.2}, {"app", 47.2}}));
  // A quoted comma or semicolon does not end the metric; escapes stay inside the quotes.
  EXPECT_EQ(parse_server_timing(R"(total;desc="a, b; \"c, d\"";dur=9, queue;dur=1)"),
            (Metrics{{"total", 9.0}, {"queue", 1.0}}));
  EXPECT_EQ(parse_server_timing(R"(total;dur="4.5")"), (Metrics{{"total", 4.5}}));
}

TEST(ServerTiming, MetricWithoutDurIsLeftOut) {
  EXPECT_EQ(parse_server_timing("miss, total;dur=2"), (Metrics{{"total", 2.0}}));
  EXPECT_EQ(parse_server_timing(R"(cache;desc="hit", total;dur=2)"), (Metrics{{"total", 2.0}}));
  EXPECT_EQ(parse_server_timing("total;dur, queue;dur="), Metrics{});
  EXPECT_TRUE(parse_server_timing("").empty());
  EXPECT_TRUE(parse_server_timing("   ").empty());
}

TEST(ServerTiming, FirstOfARepeatedDurOrMetricWins) {
  EXPECT_EQ(parse_server_timing("total;dur=1;dur=2"), (Metrics{{"total", 1.0}}));
  EXPECT_EQ(parse_server_timing("total;dur=1, total;dur=2"), (Metrics{{"total", 1.0}}));
}

TEST(ServerTiming, GarbageIsIgnoredNotThrown) {
  // Bad numbers: the metric is dropped, its neighbours kept.
  EXPECT_EQ(parse_server_timing("total;dur=abc, queue;dur=1"), (Metrics{{"queue", 1.0}}));
  EXPECT_EQ(parse_server_timing("total;dur=1.5ms, queue;dur=1"), (Metrics{{"queue", 1.0}}));
  EXPECT_EQ(parse_server_timing("total;dur=-1, queue;dur=1"), (Metrics{{"queue", 1.0}}));
  EXPECT_EQ(parse_server_timing("total;dur=nan, a;dur=inf, queue;dur=1"),
            (Metrics{{"queue", 1.0}}));
  EXPECT_EQ(parse_server_timing("total;dur=1,5"), (Metrics{{"total", 1.0}}));  // "5": no dur
  // Not a token where a name should be, stray characters after a value, empty parameter names.
  EXPECT_EQ(parse_server_timing("@@@;dur=4, queue;dur=1"), (Metrics{{"queue", 1.0}}));
  EXPECT_EQ(parse_server_timing("total;dur=4 junk, queue;dur=1"), (Metrics{{"queue", 1.0}}));
  EXPECT_EQ(parse_server_timing("total dur=4, queue;dur=1"), (Metrics{{"queue", 1.0}}));
  EXPECT_EQ(parse_server_timing("total;;dur=4, queue;dur=1"), (Metrics{{"queue", 1.0}}));
  EXPECT_EQ(parse_server_timing("total;=4, queue;dur=1"), (Metrics{{"queue", 1.0}}));
  // An unclosed quote swallows the rest of the header.
  EXPECT_EQ(parse_server_timing(R"(queue;dur=1, total;desc="open, forward;dur=2)"),
            (Metrics{{"queue", 1.0}}));
  for (const std::string& s :
       {std::string(";"), std::string("="), std::string("\""), std::string("\\"),
        std::string(",;=\"\\"), std::string("a;b=\"\\"), std::string("a;dur=\"1\\"),
        std::string("\0;dur=1", 7), std::string("\xff\xfe;dur=1"), std::string(1000, ';')}) {
    EXPECT_NO_THROW(parse_server_timing(s)) << s;
  }
}

}  // namespace
}  // namespace clef::bench

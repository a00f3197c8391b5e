// The served path: a keep-alive round trip of a tiny request costs only the server's own
// handler time. With Nagle on the server's sockets, the response's second write waited for the
// client's delayed ACK (>= 40 ms on Linux) on every request; the bench client's own separate
// header/body writes stalled the same way on the way in (the server then waits for the body: its
// `read` phase). The server's Server-Timing `total` less `read` is the handler's own time; the
// tests fail if the client's round trip exceeds it by 10 ms or more at p50.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 with -fsanitize=address reports false -Wmaybe-uninitialized inside std::regex's
// std::function members; the sanitizer build is -Werror too.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "bench/target.h"
#include "server_process.h"

namespace clef::server_test {
namespace {

constexpr const char* kTiny =
    R"({"model":"clef-demo","state":"Checkout returns 503 for every user since 09:12.",)"
    R"("questions":{"down":{"type":"noul","instructions":"Is a service down?"}}})";
constexpr int kRequests = 50;

// Milliseconds of Server-Timing's `name` metric; < 0 when absent.
double timing_ms(const std::string& header, const std::string& name) {
  std::smatch m;
  const std::regex re("(?:^|,)\\s*" + name + ";dur=([0-9.]+)");
  if (!std::regex_search(header, m, re)) return -1;
  return std::atof(m[1].str().c_str());
}

double p50(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() + 1) / 2 - 1];  // nearest rank
}

struct DemoServer {
  std::string cache;
  std::unique_ptr<ServerProcess> srv;
  DemoServer() {
    char tmpl[] = "/tmp/clef_served_path_XXXXXX";
    if (mkdtemp(tmpl)) cache = tmpl;
    srv = std::make_unique<ServerProcess>(
        std::vector<std::string>{}, std::map<std::string, std::string>{{"XDG_CACHE_HOME", cache}});
  }
  ~DemoServer() {
    srv.reset();
    std::string out;
    if (!cache.empty()) run_program({"/bin/rm", "-rf", cache}, "", &out);
  }
};

DemoServer& demo() {
  static DemoServer d;
  return d;
}

TEST(ServedPath, ServerTimingNamesEveryPhase) {
  ServerProcess& srv = *demo().srv;
  ASSERT_TRUE(srv.started()) << srv.log();
  HttpResponse r = post_json(srv.port(), kTiny);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string st = r.header("server-timing");
  // W3C syntax: `name;dur=ms` entries separated by commas.
  EXPECT_TRUE(std::regex_match(st, std::regex("[a-z]+;dur=[0-9]+\\.[0-9]{3}(, [a-z]+;dur=[0-9]+\\."
                                              "[0-9]{3})*")))
      << st;
  for (const char* m : {"read", "encode", "queue", "forward", "answer", "total"})
    EXPECT_GE(timing_ms(st, m), 0.0) << m << " missing in " << st;
  EXPECT_GT(timing_ms(st, "forward"), 0.0) << st;
  EXPECT_LE(timing_ms(st, "queue") + timing_ms(st, "forward"), timing_ms(st, "total") + 1e-3) << st;
  // Errors carry the total too (the request was handled, just refused).
  HttpResponse bad = post_json(srv.port(), R"({"model":"m","state":"x","questions":{}})");
  EXPECT_EQ(bad.status, 422);
  EXPECT_GE(timing_ms(bad.header("server-timing"), "total"), 0.0) << bad.header("server-timing");
  EXPECT_LT(timing_ms(bad.header("server-timing"), "forward"), 0.0);
}

// /health reports the start-up; the CPU engine prepares nothing and has no GPU stack to report.
TEST(ServedPath, HealthReportsStartup) {
  ServerProcess& srv = *demo().srv;
  ASSERT_TRUE(srv.started()) << srv.log();
  const auto h = http(srv.port(), "GET", "/health").json();
  ASSERT_TRUE(h.contains("startup")) << h.dump();
  EXPECT_GT(h["startup"]["load_s"].get<double>(), 0.0);
  EXPECT_GT(h["startup"]["warm_up_s"].get<double>(), 0.0);
  EXPECT_FALSE(h["startup"].contains("prepare_s")) << h.dump();
  EXPECT_FALSE(h.contains("gpu")) << h.dump();
}

TEST(ServedPath, KeepAliveRoundTripCostsOnlyTheHandlerTime) {
  ServerProcess& srv = *demo().srv;
  ASSERT_TRUE(srv.started()) << srv.log();
  KeepAliveClient client(srv.port(), /*nodelay=*/true);
  std::vector<double> overhead, rtt, read;
  for (int i = 0; i < kRequests + 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    HttpResponse r = client.post("/v1/systemone", kTiny);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(r.status, 200) << "request " << i << ": " << r.body;
    const double total = timing_ms(r.header("server-timing"), "total");
    ASSERT_GE(total, 0.0) << r.header("server-timing");
    if (i < 3) continue;  // first requests on the connection
    overhead.push_back(ms - total);
    read.push_back(timing_ms(r.header("server-timing"), "read"));
    rtt.push_back(ms);
  }
  std::printf("one-segment client: round trip p50 %.2f ms, minus handler p50 %.2f ms, read %.2f\n",
              p50(rtt), p50(overhead), p50(read));
  EXPECT_LT(p50(overhead), 10.0) << "round trip p50 " << p50(rtt) << " ms";
  EXPECT_LT(p50(read), 10.0);
}

// The bench's own client (cpp-httplib, headers and body written separately) over keep-alive.
TEST(ServedPath, BenchClientRoundTripCostsOnlyTheHandlerTime) {
  ServerProcess& srv = *demo().srv;
  ASSERT_TRUE(srv.started()) << srv.log();
  const bench::Target t = bench::parse_target("http://127.0.0.1:" + std::to_string(srv.port()));
  bench::ClientOptions opts;
  opts.timeout_s = 30;
  auto cli = bench::make_client(t, opts);
  std::vector<double> overhead, read;
  for (int i = 0; i < kRequests + 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto res = cli->Post(t.decide_path().c_str(), kTiny, "application/json");
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    ASSERT_EQ(res->status, 200) << res->body;
    const std::string st = res->get_header_value("Server-Timing");
    const double total = timing_ms(st, "total"), body = timing_ms(st, "read");
    ASSERT_GE(total, 0.0) << st;
    ASSERT_GE(body, 0.0) << st;
    if (i < 3) continue;
    // Time the server spent waiting for this client's body counts against the client.
    overhead.push_back(ms - (total - body));
    read.push_back(body);
  }
  std::printf("bench client: minus handler p50 %.2f ms (server waited for the body: p50 %.2f)\n",
              p50(overhead), p50(read));
  EXPECT_LT(p50(overhead), 10.0);
}

}  // namespace
}  // namespace clef::server_test

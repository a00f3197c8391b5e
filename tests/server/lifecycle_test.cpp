// Request and process life cycle over real HTTP: clients that hang up while their request waits in
// the queue (dropped before the engine, logged 499), the port bound before the model loads, a
// forced shutdown's exit status, stale demo-model staging folders.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 with -fsanitize=address reports false -Wmaybe-uninitialized inside std::regex's
// std::function members; the sanitizer build is -Werror too.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shared_server.h"

namespace clef::server_test {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

const char* const kSmall = kSmallRequest;

// The value of one exposition line `<series> <value>` (series with its labels), or -1.
double series_value(const std::string& text, const std::string& series) {
  const std::string key = "\n" + series + " ";
  size_t at = ("\n" + text).find(key);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + key.size() - 1));
}

// Every JSON log line whose "event" is `event`.
std::vector<json> log_events(const std::string& log, const std::string& event) {
  std::vector<json> out;
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line)) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == event) out.push_back(j);
  }
  return out;
}

// Several clients send near-max-length requests and hang up at once, while each forward pass
// holds one request only (--max-batch-tokens). Their requests are dropped from the queue before
// the engine, logged 499 "client closed", counted under 499; a client alongside gets its answer.
TEST(ServerClientGone, QueuedRequestsOfClientsThatLeaveNeverReachTheEngine) {
  ServerProcess srv({"--model", golden_model("tiny-r2"), "--max-length", "1024",
                     "--max-batch-tokens", "1000", "--threads", "1", "--log-format", "json"});
  ASSERT_TRUE(srv.started()) << srv.log();
  const std::string req = request_with_words(850);  // ~990 tokens: one per forward pass
  const std::string raw =
      "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(req.size()) + "\r\n\r\n" + req;

  constexpr int kGone = 12;
  std::vector<int> fds;
  for (int i = 0; i < kGone; ++i) {
    int fd = connect_loopback(srv.port());
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
  }
  // The whole request in one send, then close at once: the server reads the request and the end
  // of the stream together.
  for (int fd : fds) {
    ASSERT_EQ(send(fd, raw.data(), raw.size(), MSG_NOSIGNAL), static_cast<ssize_t>(raw.size()));
    close(fd);
  }
  HttpResponse normal = post_json(srv.port(), kSmall);
  EXPECT_EQ(normal.status, 200) << normal.body;
  EXPECT_EQ(normal.body, decide(kSmall).output);

  // Every departed request leaves the pipeline as a 499 (dropped, or finished unanswered).
  const std::string gone_series = R"(clef_http_requests_total{path="/v1/systemone",status="499"})";
  std::string metrics;
  auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline) {
    metrics = http(srv.port(), "GET", "/metrics").body;
    if (series_value(metrics, gone_series) >= kGone &&
        series_value(metrics, "clef_in_flight_requests") == 1)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(series_value(metrics, gone_series), kGone) << metrics;
  EXPECT_EQ(series_value(metrics, R"(clef_http_requests_total{path="/v1/systemone",status="200"})"),
            1)
      << metrics;
  const double reached = series_value(metrics, R"(clef_batch_size_requests_sum{device="cpu"})");
  const double dropped = series_value(metrics, "clef_requests_dropped_total");
  // Each request either reached the engine or was dropped; the normal one reached it.
  EXPECT_EQ(reached + dropped, kGone + 1) << metrics;
  EXPECT_GE(dropped, 1) << "every departed request still ran on the engine\n" << metrics;
  EXPECT_LT(reached, kGone + 1) << metrics;
  EXPECT_EQ(series_value(metrics, "clef_queue_depth"), 0) << metrics;

  int logged_499 = 0, logged_skipped = 0;
  for (const json& a : log_events(srv.log(), "access")) {
    if (a["status"] != 499) continue;
    ++logged_499;
    EXPECT_EQ(a["error"], "client closed") << a.dump();
    EXPECT_EQ(a["path"], "/v1/systemone") << a.dump();
    if (a["reached_engine"] == false) ++logged_skipped;
  }
  EXPECT_EQ(logged_499, kGone) << srv.log();
  EXPECT_EQ(logged_skipped, dropped) << srv.log();
  EXPECT_EQ(srv.log().find("internal_error"), std::string::npos) << srv.log();

  // The server is fine afterwards, keep-alive included.
  KeepAliveClient client(srv.port());
  HttpResponse again = client.post("/v1/systemone", req);
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(client.get("/health").status, 200);
}

// The port is bound before anything is loaded: a port in use fails at once with one clear line,
// without loading the model (no "loaded", "warm_up" or "listening" line) and exits 1.
TEST(ServerStartup, PortInUseFailsBeforeLoading) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 8), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  const auto t0 = Clock::now();
  ServerProcess srv({"--model", golden_model("tiny-r2"), "--port", std::to_string(port),
                     "--max-length", "16384"});
  EXPECT_FALSE(srv.started());
  EXPECT_EQ(srv.wait_exit(30), 1) << srv.log();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  // Generous for a loaded machine and sanitizer builds; the log below is the real proof.
  EXPECT_LT(secs, 10.0) << srv.log();
  const std::string log = srv.log();
  EXPECT_NE(log.find("startup_failed"), std::string::npos) << log;
  EXPECT_NE(log.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << log;
  EXPECT_EQ(log.find("info load"), std::string::npos) << "the model was loaded first:\n" << log;
  EXPECT_EQ(log.find("info warm_up"), std::string::npos) << log;
  EXPECT_EQ(log.find("info listening"), std::string::npos) << log;
  close(fd);
}

// Start-up order in the log: bound (before loading) ... loaded ... warm_up ... listening.
TEST(ServerStartup, BindsBeforeLoadingAndListensAfterWarmUp) {
  ServerProcess srv({"--model", golden_model("tiny-r2")});
  ASSERT_TRUE(srv.started()) << srv.log();
  const std::string log = srv.log();
  const size_t bound = log.find("info bound "), loaded = log.find("info loaded "),
               warm = log.find("info warm_up "), listening = log.find("info listening ");
  ASSERT_NE(bound, std::string::npos) << log;
  ASSERT_NE(loaded, std::string::npos) << log;
  ASSERT_NE(warm, std::string::npos) << log;
  ASSERT_NE(listening, std::string::npos) << log;
  EXPECT_LT(bound, loaded) << log;
  EXPECT_LT(loaded, warm) << log;
  EXPECT_LT(warm, listening) << log;
  EXPECT_EQ(http(srv.port(), "GET", "/health").json()["status"], "ok");
}

// Milliseconds since midnight UTC of a text log line's timestamp (`2026-12-01T09:25:17.823Z ...`).
int64_t log_time_ms(const std::string& line) {
  int h = 0, m = 0, s = 0, ms = 0;
  if (std::sscanf(line.c_str(), "%*10sT%d:%d:%d.%dZ", &h, &m, &s, &ms) != 4) return -1;
  return ((h * 60 + m) * 60 + s) * 1000LL + ms;
}

// A /health probe that connects while the server is still starting (here: generating the demo
// model) waits and is answered only once the server listens, after the warm-up.
TEST(ServerStartup, EarlyHealthProbeIsAnsweredOnlyAfterWarmUp) {
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(probe, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  close(probe);  // free again for the server (nothing else binds loopback ports here)

  char tmpl[] = "/tmp/clef_demo_early_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string cache = tmpl;
  HttpResponse early;
  int64_t answered_ms = -1;
  std::thread client([&] {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline) {
      int fd = connect_loopback(port);
      if (fd < 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      close(fd);
      early = http(port, "GET", "/health", "", {}, 60);
      const auto now = std::chrono::system_clock::now().time_since_epoch();
      answered_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now).count() % 86400000;
      return;
    }
  });
  ServerProcess srv({"--port", std::to_string(port)}, {{"XDG_CACHE_HOME", cache}});
  client.join();
  ASSERT_TRUE(srv.started()) << srv.log();
  EXPECT_EQ(early.status, 200) << srv.log();
  EXPECT_EQ(early.json()["status"], "ok");
  const std::string log = srv.log();
  const size_t at = log.find("info listening ");
  ASSERT_NE(at, std::string::npos) << log;
  const int64_t listening_ms = log_time_ms(log.substr(log.rfind('\n', at) + 1));
  ASSERT_GE(listening_ms, 0) << log;
  // Same clock (the log's is the system clock), millisecond resolution.
  EXPECT_GE(answered_ms, listening_ms) << "answered before the server listened\n" << log;
  std::string out;
  run_program({"/bin/rm", "-rf", cache}, "", &out);
}

// Connections still open at --shutdown-timeout: `shutdown_forced`, exit status 1 (not 0).
TEST(ServerShutdown, ForcedShutdownExitsNonZero) {
  ServerProcess srv(
      {"--model", golden_model("tiny-r2"), "--shutdown-timeout", "1", "--body-timeout", "300"});
  ASSERT_TRUE(srv.started()) << srv.log();
  // Headers and half a body, then nothing: in flight until its body deadline (300 s).
  const std::string body = kSmall;
  int fd = connect_loopback(srv.port());
  ASSERT_GE(fd, 0);
  const std::string head =
      "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body.substr(0, body.size() / 2);
  ASSERT_EQ(send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  // Wait until the server counts it (the /metrics request itself is the other one).
  KeepAliveClient poller(srv.port());
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (series_value(poller.get("/metrics").body, "clef_in_flight_requests") < 2 &&
         Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(series_value(poller.get("/metrics").body, "clef_in_flight_requests"), 2);
  srv.signal(SIGTERM);
  EXPECT_EQ(srv.wait_exit(60), 1) << srv.log();
  EXPECT_NE(srv.log().find("shutdown_forced"), std::string::npos) << srv.log();
  close(fd);
}

// A server killed while generating the demo model leaves `<demo dir>.partial-<pid>` behind: the
// next start removes it (its process is gone), keeps one whose process is alive (a server
// generating right now), and serves the demo model.
TEST(ServerDemo, StaleStagingFoldersAreRemovedAtStart) {
  char tmpl[] = "/tmp/clef_demo_stale_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string cache = tmpl;
  const std::string demo = cache + "/clefserve/demo-" + CLEF_VERSION;
  // pid_max is at most 2^22 on Linux: no process has this id.
  const std::string stale = demo + ".partial-99999999";
  const std::string live = demo + ".partial-" + std::to_string(getpid());
  for (const std::string& d : {cache + "/clefserve", stale, live})
    ASSERT_EQ(mkdir(d.c_str(), 0755), 0) << d;
  std::ofstream(stale + "/model.safetensors") << "half-written";
  std::ofstream(stale + "/config.json") << "{";

  ServerProcess srv({}, {{"XDG_CACHE_HOME", cache}});
  ASSERT_TRUE(srv.started()) << srv.log();
  struct stat st {};
  EXPECT_NE(stat(stale.c_str(), &st), 0) << "stale staging folder still there\n" << srv.log();
  EXPECT_EQ(stat(live.c_str(), &st), 0) << "a live process's staging folder was removed";
  EXPECT_EQ(stat((demo + "/config.json").c_str(), &st), 0) << srv.log();
  EXPECT_NE(srv.log().find("removed the stale demo staging folder"), std::string::npos)
      << srv.log();
  EXPECT_EQ(http(srv.port(), "GET", "/health").json()["demo"], true);
  HttpResponse r = post_json(srv.port(), kSmall);
  EXPECT_EQ(r.status, 200) << r.body;
  std::string out;
  run_program({"/bin/rm", "-rf", cache}, "", &out);
}

}  // namespace
}  // namespace clef::server_test

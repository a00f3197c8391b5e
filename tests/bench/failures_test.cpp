// Failures are counted by kind, never a crash: the real server killed mid-run (transport failures
// after successes), and a scripted fake server for HTTP-status, invalid-body and timeout answers.
#include <gtest/gtest.h>

#include <signal.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "bench/report.h"
#include "bench/runner.h"
#include "bench_helpers.h"

namespace clef::bench {
namespace {

using Json = nlohmann::ordered_json;

using namespace clef::bench::testing;

TEST(BenchFailures, ServerKilledMidRunGivesCountedFailures) {
  const std::string dir = temp_dir("killed");
  const int port = free_port();
  auto server = start_tiny_server(port, dir + "/server.log");
  const Manifest m = parse_manifest(
      R"({"id": "short", "state": "a short state", "question": {"type": "noul", "instructions": "Late?"}})",
      "inline", {});
  const Target t = parse_target(url_of(port));
  // Size the run from one request's latency so it lasts ~4 s. The server dies as soon as the run
  // reports its first 5 % done without a failure (its progress lines, read from a pipe), not on a
  // timer: under sanitizers and a loaded machine a fixed second could pass before any answer.
  auto cli = make_client(t, {});
  const RequestRecord probe = timed_request(*cli, t, {}, m.items[0]);
  ASSERT_EQ(probe.outcome, Outcome::Ok) << probe.error;
  RunOptions opts;
  opts.warmup = 0;
  opts.traversals = static_cast<int>(4000.0 / std::max(1.0, probe.latency_ms)) + 40;
  opts.client.timeout_s = 5.0;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::FILE* progress = fdopen(fds[1], "w");
  ASSERT_NE(progress, nullptr);
  bool killed = false;
  std::thread watcher([&] {
    std::FILE* in = fdopen(fds[0], "r");
    char line[512];
    while (in && std::fgets(line, sizeof line, in))
      if (!killed && std::strstr(line, "measured") && std::strstr(line, " done, 0 failed")) {
        kill(server->pid(), SIGKILL);
        killed = true;
      }
    if (in) std::fclose(in);
  });
  CampaignResult result;
  std::thread run([&] { result = run_campaign(m, t, opts, progress); });
  run.join();
  std::fclose(progress);  // the watcher sees the end of the pipe
  watcher.join();
  server->stop();
  ASSERT_TRUE(killed) << "the run never reported progress without a failure";

  ASSERT_EQ(result.measured.size(), static_cast<size_t>(opts.traversals));
  size_t ok = 0, transport = 0;
  for (const auto& r : result.measured) {
    ok += r.outcome == Outcome::Ok;
    transport += r.outcome == Outcome::Transport;
  }
  EXPECT_GT(ok, 0u);
  EXPECT_GT(transport, 0u);
  // Once the server is gone every later request fails: successes come first, then failures.
  size_t first_fail = 0;
  while (first_fail < result.measured.size() && result.measured[first_fail].outcome == Outcome::Ok)
    ++first_fail;
  EXPECT_EQ(first_fail, ok);

  ServerEvidence ev;
  ev.health = "unknown";
  ReportInputs in;
  in.manifest = &m;
  in.campaign = &result;
  in.server = &ev;
  in.url = t.url;
  in.model = "clef-flash";
  in.run = opts;
  const Json report = build_report(in);
  EXPECT_EQ(report["successful"], ok);
  EXPECT_EQ(report["failures"]["transport"], transport);
  EXPECT_EQ(report["failures"]["total"].get<size_t>() + ok, report["planned"].get<size_t>());
  EXPECT_EQ(report["successful_latency_ms"]["count"], ok);
  write_report_files(report, dir + "/out");
  EXPECT_TRUE(std::filesystem::exists(dir + "/out/latency.svg"));
  std::filesystem::remove_all(dir);
}

// A scripted server: the request's state says how to misbehave.
class FakeServer {
 public:
  FakeServer() {
    srv_.Post("/v1/systemone", [](const httplib::Request& req, httplib::Response& res) {
      if (req.get_header_value("Authorization") != "Bearer sesame") {
        res.status = 401;
        res.set_content(R"({"detail": "unauthorized"})", "application/json");
        return;
      }
      const Json body = Json::parse(req.body);
      const std::string mode = body["state"];
      if (mode == "503") {
        res.status = 503;
        res.set_content(R"({"detail": "not ready"})", "application/json");
      } else if (mode == "422") {
        res.status = 422;
        res.set_content(R"({"detail": []})", "application/json");
      } else if (mode == "truncated") {
        res.set_content(R"({"model": "m", "answers": {)", "application/json");
      } else if (mode == "bad-sum") {
        res.set_content(R"({"model": "m", "answers": {"decision": {"type": "choice", "choice": "a",
            "confidence": 0.9, "probabilities": {"a": 0.9, "b": 0.2}}}, "usage": {"input_tokens": 5,
            "output_tokens": 0}})",
                        "application/json");
      } else if (mode == "slow") {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        res.set_content("{}", "application/json");
      } else {
        res.set_content(R"({"model": "m", "answers": {"decision": {"type": "choice", "choice": "a",
            "confidence": 0.7, "probabilities": {"a": 0.7, "b": 0.3}}}, "usage": {"input_tokens": 5,
            "output_tokens": 0}})",
                        "application/json");
      }
    });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    while (!srv_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    srv_.stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  httplib::Server srv_;
  std::thread thread_;
  int port_ = 0;
};

TEST(BenchFailures, FailureKindsAreCountedSeparately) {
  FakeServer fake;
  std::string text;
  for (const char* mode : {"ok", "503", "422", "truncated", "bad-sum", "slow", "ok2"}) {
    text +=
        std::string(R"({"id": ")") + mode + R"(", "state": ")" + mode +
        R"(", "question": {"type": "choice", "criteria": {"a": "A", "b": "B"}}, "expected": "a"})" +
        "\n";
  }
  ManifestOptions mo;
  mo.model = "m";
  const Manifest m = parse_manifest(text, "inline", mo);
  RunOptions opts;
  opts.warmup = 0;
  opts.traversals = 1;
  opts.client.timeout_s = 0.5;
  opts.client.api_key = "sesame";
  const CampaignResult result = run_campaign(m, parse_target(url_of(fake.port())), opts, nullptr);
  ServerEvidence ev;
  ReportInputs in;
  in.manifest = &m;
  in.campaign = &result;
  in.server = &ev;
  in.url = "fake";
  in.model = "m";
  in.run = opts;
  const Json r = build_report(in);
  EXPECT_EQ(r["planned"], 7);
  EXPECT_EQ(r["successful"], 2);
  EXPECT_EQ(r["failures"]["http_status"], 2);
  EXPECT_EQ(r["failures"]["by_http_status"]["503"], 1);
  EXPECT_EQ(r["failures"]["by_http_status"]["422"], 1);
  EXPECT_EQ(r["failures"]["invalid_body"], 2);
  EXPECT_EQ(r["failures"]["transport"], 1);  // read timeout
  EXPECT_EQ(r["failures"]["total"], 5);
  EXPECT_EQ(r["requests"][3]["outcome"], "invalid_body");
  EXPECT_NE(r["requests"][4]["error"].get<std::string>().find("sum to"), std::string::npos);
  EXPECT_EQ(r["requests"][1]["status"], 503);
  EXPECT_TRUE(r["requests"][5]["status"].is_null());
  EXPECT_EQ(r["successful_latency_ms"]["count"], 2);
  EXPECT_EQ(r["quality"]["n_choice"], 2);
  EXPECT_EQ(r["quality"]["unanswered"], 5);
  EXPECT_EQ(r["quality"]["choice_acc"], 1.0);
  EXPECT_EQ(r["evidence_complete"], false);  // no /health
}

TEST(BenchFailures, MissingApiKeyIsAnHttpStatusFailure) {
  FakeServer fake;
  const Manifest m = parse_manifest(
      R"({"id": "a", "state": "ok", "question": {"type": "choice", "criteria": {"a": "A", "b": "B"}}})",
      "m", {});
  RunOptions opts;
  opts.warmup = 1;
  opts.traversals = 2;
  const CampaignResult result = run_campaign(m, parse_target(url_of(fake.port())), opts, nullptr);
  ASSERT_EQ(result.measured.size(), 2u);
  ASSERT_EQ(result.warmup.size(), 1u);
  for (const auto& r : result.measured) {
    EXPECT_EQ(r.outcome, Outcome::HttpStatus);
    EXPECT_EQ(r.http_status, 401);
  }
}

}  // namespace
}  // namespace clef::bench

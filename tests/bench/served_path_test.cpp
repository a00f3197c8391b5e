// The served path: the bench's client sets TCP_NODELAY, reads the server's Server-Timing
// header, and the report gives client - server overhead and per-traversal latency; the evidence
// takes the GPU's driver, CUDA runtime and cuBLASLt versions from /health's "gpu" object. Report
// numbers come from synthetic records whose expected values are worked out by hand below.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <thread>

#include "bench/evidence.h"
#include "bench/report.h"
#include "bench/runner.h"
#include "bench_helpers.h"

namespace clef::bench {
namespace {

using Json = nlohmann::ordered_json;

using namespace clef::bench::testing;

constexpr const char* kAnswer =
    R"({"model": "m", "answers": {"decision": {"type": "choice", "choice": "a", "confidence": 0.7,
    "probabilities": {"a": 0.7, "b": 0.3}}}, "usage": {"input_tokens": 5, "output_tokens": 0}})";

// A server whose /v1/systemone answers validly with the Server-Timing lines it is given, and whose
// /health is the given body.
class TimingServer {
 public:
  TimingServer(std::vector<std::string> timing, std::string health)
      : timing_(std::move(timing)), health_(std::move(health)) {
    srv_.set_tcp_nodelay(true);  // so only the client's Nagle could delay a request
    srv_.Post("/v1/systemone", [this](const httplib::Request&, httplib::Response& res) {
      for (const auto& t : timing_) res.set_header("Server-Timing", t);
      res.set_content(kAnswer, "application/json");
    });
    srv_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(health_, "application/json");
    });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    while (!srv_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~TimingServer() {
    srv_.stop();
    thread_.join();
  }
  Target target() const { return parse_target(url_of(port_)); }

 private:
  std::vector<std::string> timing_;
  std::string health_;
  httplib::Server srv_;
  std::thread thread_;
  int port_ = 0;
};

Manifest choice_manifest(int items) {
  std::string text;
  for (int i = 0; i < items; ++i)
    text += R"({"id": "i)" + std::to_string(i) +
            R"(", "state": "s", "question": {"type": "choice", "criteria": {"a": "A", "b": "B"}}})"
            "\n";
  ManifestOptions mo;
  mo.model = "m";
  return parse_manifest(text, "inline", mo);
}

TEST(ServedPath, ClientSetsTcpNoDelay) {
  TimingServer srv({}, "{}");
  const Target t = srv.target();
  auto cli = make_client(t, {});
  ASSERT_TRUE(cli->Get("/health"));
  // Keep-alive leaves the request's socket open: ask the kernel what the client set on it.
  ASSERT_GT(cli->is_socket_open(), 0u);
  int on = 0;
  socklen_t len = sizeof on;
  ASSERT_EQ(getsockopt(cli->socket(), IPPROTO_TCP, TCP_NODELAY, &on, &len), 0);
  EXPECT_NE(on, 0);
}

TEST(ServedPath, TimedRequestRecordsServerTiming) {
  // Two header lines (one list), metrics in another order than clefserve's, plus one unknown.
  TimingServer srv({"forward;dur=11.032, encode;dur=0.4", "total;dur=11.456, queue;dur=0.012"},
                   "{}");
  const Manifest m = choice_manifest(1);
  auto cli = make_client(srv.target(), {});
  const RequestRecord r = timed_request(*cli, srv.target(), {}, m.items[0]);
  ASSERT_EQ(r.outcome, Outcome::Ok) << r.error;
  EXPECT_TRUE(r.server_timing_sent);
  ASSERT_TRUE(r.server_total_ms && r.server_queue_ms && r.server_forward_ms);
  EXPECT_EQ(*r.server_total_ms, 11.456);
  EXPECT_EQ(*r.server_queue_ms, 0.012);
  EXPECT_EQ(*r.server_forward_ms, 11.032);
}

TEST(ServedPath, TimedRequestWithoutOrPartialServerTiming) {
  const Manifest m = choice_manifest(1);
  {
    TimingServer srv({}, "{}");
    auto cli = make_client(srv.target(), {});
    const RequestRecord r = timed_request(*cli, srv.target(), {}, m.items[0]);
    ASSERT_EQ(r.outcome, Outcome::Ok) << r.error;
    EXPECT_FALSE(r.server_timing_sent);
    EXPECT_FALSE(r.server_total_ms || r.server_queue_ms || r.server_forward_ms);
  }
  {
    TimingServer srv({R"(app;desc="no total here";dur=3, queue;dur=0.5)"}, "{}");
    auto cli = make_client(srv.target(), {});
    const RequestRecord r = timed_request(*cli, srv.target(), {}, m.items[0]);
    ASSERT_EQ(r.outcome, Outcome::Ok) << r.error;
    EXPECT_TRUE(r.server_timing_sent);
    EXPECT_FALSE(r.server_total_ms);
    EXPECT_FALSE(r.server_forward_ms);
    ASSERT_TRUE(r.server_queue_ms);
    EXPECT_EQ(*r.server_queue_ms, 0.5);
  }
}

RequestRecord rec(size_t item, int traversal, double latency, std::optional<double> total,
                  std::optional<double> queue = std::nullopt,
                  std::optional<double> forward = std::nullopt, Outcome outcome = Outcome::Ok) {
  RequestRecord r;
  r.item = item;
  r.traversal = traversal;
  r.latency_ms = latency;
  r.outcome = outcome;
  r.http_status = outcome == Outcome::Ok ? 200 : 503;
  if (outcome != Outcome::Ok) r.error = "HTTP 503";
  r.server_timing_sent = total || queue || forward;
  r.server_total_ms = total;
  r.server_queue_ms = queue;
  r.server_forward_ms = forward;
  return r;
}

Json report_of(const Manifest& m, const CampaignResult& c) {
  ServerEvidence ev;
  ReportInputs in;
  in.manifest = &m;
  in.campaign = &c;
  in.server = &ev;
  in.url = "synthetic";
  in.model = "m";
  in.run.traversals = 3;
  return build_report(in);
}

// Three traversals over two items. Successful requests with a server total, latency - total:
//   t0 i0 50 - 40 = 10, t0 i1 30 - 27.5 = 2.5, t1 i0 12 - 11 = 1, t1 i1 14 - 12.5 = 1.5
// t2 i0 (13 ms) sent no header; t2 i1 failed (HTTP 503, 5 ms, total 4): in the per-request list,
// never in a summary; the warm-up's huge overhead is not counted either.
CampaignResult synthetic_campaign() {
  CampaignResult c;
  c.warmup = {rec(0, -1, 900, 1)};
  c.measured = {rec(0, 0, 50, 40, 0.25, 39),
                rec(1, 0, 30, 27.5, 0.5),
                rec(0, 1, 12, 11, 0.125, 10.5),
                rec(1, 1, 14, 12.5, 1),
                rec(0, 2, 13, std::nullopt),
                rec(1, 2, 5, 4, std::nullopt, std::nullopt, Outcome::HttpStatus)};
  c.measured_wall_s = 1.0;
  return c;
}

TEST(ServedPathReport, OverheadSummaryFromSyntheticRecords) {
  const Manifest m = choice_manifest(2);
  const CampaignResult c = synthetic_campaign();
  const Json r = report_of(m, c);
  // Overheads of the 4 counted requests, sorted: 1, 1.5, 2.5, 10. Nearest rank on n = 4:
  // p50 = sorted[ceil(2) - 1] = 1.5, p95 = sorted[ceil(3.8) - 1] = 10; mean 15 / 4 = 3.75.
  const Json& o = r["overhead_ms"];
  EXPECT_EQ(o["count"], 4);
  EXPECT_EQ(o["p50"], 1.5);
  EXPECT_EQ(o["p95"], 10.0);
  EXPECT_EQ(o["mean"], 3.75);
  EXPECT_EQ(o["max"], 10.0);
  EXPECT_FALSE(r.contains("overhead_note"));
  // Server totals sorted: 11, 12.5, 27.5, 40; mean 91 / 4 = 22.75.
  const Json& s = r["server_total_ms"];
  EXPECT_EQ(s["count"], 4);
  EXPECT_EQ(s["p50"], 12.5);
  EXPECT_EQ(s["p95"], 40.0);
  EXPECT_EQ(s["mean"], 22.75);
  EXPECT_EQ(s["max"], 40.0);
  // Queue on all four (0.125, 0.25, 0.5, 1), forward on two (10.5, 39).
  EXPECT_EQ(r["server_queue_ms"]["count"], 4);
  EXPECT_EQ(r["server_queue_ms"]["p50"], 0.25);
  EXPECT_EQ(r["server_forward_ms"]["count"], 2);
  EXPECT_EQ(r["server_forward_ms"]["p50"], 10.5);
  EXPECT_EQ(r["server_forward_ms"]["p95"], 39.0);

  // Per request.
  const Json& q = r["requests"];
  ASSERT_EQ(q.size(), 6u);
  EXPECT_EQ(q[0]["server_timing"]["total"], 40.0);
  EXPECT_EQ(q[0]["server_timing"]["queue"], 0.25);
  EXPECT_EQ(q[0]["server_timing"]["forward"], 39.0);
  EXPECT_EQ(q[0]["overhead_ms"], 10.0);
  EXPECT_EQ(q[1]["overhead_ms"], 2.5);
  EXPECT_TRUE(q[1]["server_timing"]["forward"].is_null());
  EXPECT_FALSE(q[4].contains("server_timing"));
  EXPECT_FALSE(q[4].contains("overhead_ms"));
  EXPECT_EQ(q[5]["outcome"], "http_status");
  EXPECT_EQ(q[5]["overhead_ms"], 1.0);
}

TEST(ServedPathReport, LatencyByTraversal) {
  const Manifest m = choice_manifest(2);
  const CampaignResult c = synthetic_campaign();
  const Json r = report_of(m, c);
  const Json& t = r["latency_by_traversal"];
  ASSERT_EQ(t.size(), 3u);
  // t0: 30, 50 -> p50 rank 1 = 30, p95 rank 2 = 50, mean 40.
  EXPECT_EQ(t[0]["traversal"], 0);
  EXPECT_EQ(t[0]["count"], 2);
  EXPECT_EQ(t[0]["p50"], 30.0);
  EXPECT_EQ(t[0]["p95"], 50.0);
  EXPECT_EQ(t[0]["mean"], 40.0);
  EXPECT_EQ(t[0]["max"], 50.0);
  // t1: 12, 14 -> 12, 14, mean 13.
  EXPECT_EQ(t[1]["traversal"], 1);
  EXPECT_EQ(t[1]["count"], 2);
  EXPECT_EQ(t[1]["p50"], 12.0);
  EXPECT_EQ(t[1]["p95"], 14.0);
  EXPECT_EQ(t[1]["mean"], 13.0);
  // t2: only the successful 13 ms request.
  EXPECT_EQ(t[2]["traversal"], 2);
  EXPECT_EQ(t[2]["count"], 1);
  EXPECT_EQ(t[2]["p50"], 13.0);
  EXPECT_EQ(t[2]["max"], 13.0);
}

TEST(ServedPathReport, MarkdownShowsOverheadAndTraversals) {
  const Manifest m = choice_manifest(2);
  const CampaignResult c = synthetic_campaign();
  const std::string md = report_markdown(report_of(m, c));
  EXPECT_NE(
      md.find("client \u2212 server (Server-Timing total) overhead p50 / p95: 1.50 / 10.00 ms "
              "(mean 3.75, max 10.00, over 4 successful requests); server total p50 / p95: "
              "12.50 / 40.00 ms, queue p50 0.25 ms, forward p50 10.50 ms."),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("| traversal | successful | p50 ms | p95 ms | mean ms | max ms |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 0 | 2 | 30.0 | 50.0 | 40.0 | 50.0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 | 2 | 12.0 | 14.0 | 13.0 | 14.0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 2 | 1 | 13.0 | 13.0 | 13.0 | 13.0 |"), std::string::npos) << md;
}

TEST(ServedPathReport, NoServerTimingIsSaidNotNumbered) {
  const Manifest m = choice_manifest(2);
  CampaignResult c;
  c.measured = {rec(0, 0, 20, std::nullopt), rec(1, 0, 30, std::nullopt)};
  const Json r = report_of(m, c);
  EXPECT_EQ(r["overhead_ms"]["count"], 0);
  EXPECT_TRUE(r["overhead_ms"]["p50"].is_null());
  EXPECT_TRUE(r["overhead_ms"]["p95"].is_null());
  EXPECT_EQ(r["server_total_ms"]["count"], 0);
  EXPECT_EQ(r["overhead_note"], "server sent no Server-Timing");
  EXPECT_FALSE(r["requests"][0].contains("overhead_ms"));
  const std::string md = report_markdown(r);
  EXPECT_NE(md.find("client \u2212 server (Server-Timing total) overhead: n/a, server sent no "
                    "Server-Timing."),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("overhead p50 / p95"), std::string::npos) << md;
  // One traversal: its row would repeat the main table.
  EXPECT_EQ(r["latency_by_traversal"].size(), 1u);
  EXPECT_EQ(md.find("| traversal |"), std::string::npos) << md;

  // A header without a total metric is a different statement.
  c.measured = {rec(0, 0, 20, std::nullopt, 0.5)};
  const Json p = report_of(m, c);
  EXPECT_EQ(p["overhead_ms"]["count"], 0);
  EXPECT_EQ(p["overhead_note"], "the server's Server-Timing had no total metric");
  EXPECT_EQ(p["server_queue_ms"]["count"], 1);
}

// /health of a CUDA clefserve: the GPU facts sit in its "gpu" object, the top-level "device" is the
// GPU name plus its architecture.
constexpr const char* kCudaHealth = R"({"status": "ok", "backend": "cuda",
    "device": "NVIDIA H200, sm_90", "gpu": {"name": "NVIDIA H200", "driver_version": "580.159.04",
    "cuda_driver_api": "13.0", "cuda_runtime": "12.8", "cublaslt": "13.1.0"}})";

TEST(ServedPathEvidence, GpuObjectOfHealth) {
  TimingServer srv({}, kCudaHealth);
  const ServerEvidence ev = gather_server_evidence(srv.target(), {});
  EXPECT_EQ(ev.gpu.name, "NVIDIA H200");
  EXPECT_EQ(ev.gpu.driver, "580.159.04");
  EXPECT_EQ(ev.gpu.cuda, "12.8");  // the runtime's version, not the driver API's 13.0
  EXPECT_EQ(ev.gpu.cublaslt, "13.1.0");
  EXPECT_EQ(ev.gpu.source, "health");

  const Manifest m = choice_manifest(1);
  CampaignResult c;
  ReportInputs in;
  in.manifest = &m;
  in.campaign = &c;
  in.server = &ev;
  in.model = "m";
  const Json r = build_report(in);
  EXPECT_EQ(r["evidence"]["gpu"]["cublaslt"], "13.1.0");
  EXPECT_EQ(r["evidence"]["gpu"]["driver"], "580.159.04");
  for (const auto& path : r["evidence_missing"])
    EXPECT_EQ(path.get<std::string>().rfind("gpu.", 0), std::string::npos) << path;
  EXPECT_NE(
      report_markdown(r).find("GPU NVIDIA H200, driver 580.159.04, CUDA 12.8, cuBLASLt 13.1.0"),
      std::string::npos);
}

TEST(ServedPathEvidence, CublasltUnknownOnlyForACudaServerThatOmitsIt) {
  Json h = Json::parse(kCudaHealth);
  h["gpu"].erase("cublaslt");
  {
    TimingServer srv({}, h.dump());
    const ServerEvidence ev = gather_server_evidence(srv.target(), {});
    EXPECT_EQ(ev.gpu.cublaslt, kUnknown);
    EXPECT_EQ(ev.gpu.driver, "580.159.04");
    Json gpu = {{"cublaslt", ev.gpu.cublaslt}};
    EXPECT_EQ(missing_evidence(Json{{"gpu", gpu}}), std::vector<std::string>{"gpu.cublaslt"});
  }
  {
    TimingServer srv({}, R"({"status": "ok", "backend": "cpu", "device": "2-thread x86-64 CPU"})");
    const ServerEvidence ev = gather_server_evidence(srv.target(), {});
    EXPECT_EQ(ev.gpu.cublaslt, "not applicable (cpu backend)");
    EXPECT_EQ(ev.gpu.driver, "not applicable (cpu backend)");
  }
  {
    // Another server that names no backend: cuBLASLt is not asked of it.
    TimingServer srv({}, R"({"status": "ok"})");
    const ServerEvidence ev = gather_server_evidence(srv.target(), {});
    EXPECT_NE(ev.gpu.cublaslt, kUnknown);
    EXPECT_NE(ev.gpu.cublaslt.find("not reported"), std::string::npos) << ev.gpu.cublaslt;
  }
}

}  // namespace
}  // namespace clef::bench

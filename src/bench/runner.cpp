#include "bench/runner.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <mutex>
#include <thread>

#include "bench/response_check.h"
#include "bench/server_timing.h"

namespace clef::bench {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::Ok:
      return "ok";
    case Outcome::HttpStatus:
      return "http_status";
    case Outcome::Transport:
      return "transport";
    case Outcome::InvalidBody:
      return "invalid_body";
  }
  return "?";
}

std::string utc_now_iso8601() {
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
}

namespace {

void record_server_timing(const httplib::Response& res, RequestRecord* r) {
  // Several Server-Timing lines mean one comma-separated list (RFC 9110 field combination).
  std::string header;
  const size_t n = res.get_header_value_count("Server-Timing");
  for (size_t i = 0; i < n; ++i) {
    if (i) header += ", ";
    header += res.get_header_value("Server-Timing", i);
  }
  r->server_timing_sent = n > 0;
  if (!n) return;
  const auto metrics = parse_server_timing(header);
  auto get = [&metrics](const char* name) -> std::optional<double> {
    const auto it = metrics.find(name);
    if (it == metrics.end()) return std::nullopt;
    return it->second;
  };
  r->server_total_ms = get("total");
  r->server_queue_ms = get("queue");
  r->server_forward_ms = get("forward");
}

}  // namespace

RequestRecord timed_request(httplib::Client& cli, const Target& t, const httplib::Headers& headers,
                            const Item& item) {
  RequestRecord r;
  const auto t0 = std::chrono::steady_clock::now();
  auto res = cli.Post(t.decide_path().c_str(), headers, item.body, "application/json");
  if (!res) {
    r.outcome = Outcome::Transport;
    r.error = "transport: " + httplib::to_string(res.error());
  } else if (res->status != 200) {
    r.http_status = res->status;
    r.outcome = Outcome::HttpStatus;
    r.error = "HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 300);
  } else {
    r.http_status = res->status;
    CheckedResponse checked;
    r.error = check_response(item, res->body, &checked);
    if (r.error.empty()) {
      r.outcome = Outcome::Ok;
      r.input_tokens = checked.input_tokens;
      r.answers = std::move(checked.answers);
    } else {
      r.outcome = Outcome::InvalidBody;
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  r.latency_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  // Read after the clock stopped: parsing the server's account is no part of the client's time.
  if (res) record_server_timing(*res, &r);
  return r;
}

namespace {

struct Plan {
  std::vector<size_t> items;
  std::vector<int> traversal;
};

// Runs `plan` with `workers` closed-loop workers; records land at their planned index.
std::vector<RequestRecord> run_plan(const Manifest& m, const Target& t, const RunOptions& opts,
                                    const Plan& plan, const char* phase, std::FILE* progress) {
  std::vector<RequestRecord> out(plan.items.size());
  std::atomic<size_t> next{0};
  std::mutex progress_mu;
  size_t done = 0, failed = 0;
  double last_print_s = 0.0;
  const size_t every = std::max<size_t>(1, plan.items.size() / 20);
  const auto start = std::chrono::steady_clock::now();
  const httplib::Headers headers = request_headers(opts.client);
  auto worker = [&] {
    auto cli = make_client(t, opts.client);
    for (size_t i = next++; i < plan.items.size(); i = next++) {
      RequestRecord r = timed_request(*cli, t, headers, m.items[plan.items[i]]);
      r.item = plan.items[i];
      r.traversal = plan.traversal[i];
      const bool ok = r.outcome == Outcome::Ok;
      std::string error = r.error;
      out[i] = std::move(r);
      if (!progress) continue;
      std::lock_guard<std::mutex> lock(progress_mu);
      ++done;
      failed += !ok;
      if (!ok && failed <= 5)
        std::fprintf(progress, "bench: %s request failed: %s\n", phase, error.c_str());
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // Every 5% of the plan, and at least every 30 s so a slow run still shows it is alive.
      if (done % every == 0 || done == plan.items.size() || s - last_print_s >= 30.0) {
        last_print_s = s;
        std::fprintf(progress, "bench: %s %zu/%zu done, %zu failed, %.1f s\n", phase, done,
                     plan.items.size(), failed, s);
        std::fflush(progress);
      }
    }
  };
  const int n = std::max(1, std::min<int>(opts.concurrency, static_cast<int>(plan.items.size())));
  std::vector<std::thread> threads;
  for (int w = 1; w < n; ++w) threads.emplace_back(worker);
  worker();
  for (auto& th : threads) th.join();
  return out;
}

// GET /metrics: its body, or "" with *error set (the first failure is kept).
std::string fetch_metrics(const Target& t, const ClientOptions& opts, std::string* error) {
  auto cli = make_client(t, opts);
  auto res = cli->Get(t.metrics_path().c_str(), request_headers(opts));
  std::string why;
  if (!res)
    why = "transport: " + httplib::to_string(res.error());
  else if (res->status != 200)
    why = "HTTP " + std::to_string(res->status);
  if (why.empty()) return res->body;
  if (error->empty()) *error = "GET " + t.metrics_path() + ": " + why;
  return {};
}

}  // namespace

CampaignResult run_campaign(const Manifest& m, const Target& t, const RunOptions& opts,
                            std::FILE* progress) {
  // cpp-httplib writes with send(..., 0): a server that dies mid-request would raise SIGPIPE and
  // kill the bench instead of producing a counted transport failure.
  std::signal(SIGPIPE, SIG_IGN);
  CampaignResult result;
  result.start_utc = utc_now_iso8601();
  Plan warm;
  for (int k = 0; k < opts.warmup; ++k) {
    warm.items.push_back(static_cast<size_t>(k) % m.items.size());
    warm.traversal.push_back(-1);
  }
  if (!warm.items.empty()) result.warmup = run_plan(m, t, opts, warm, "warm-up", progress);
  Plan plan;
  for (int tr = 0; tr < opts.traversals; ++tr) {
    for (size_t i = 0; i < m.items.size(); ++i) {
      plan.items.push_back(i);
      plan.traversal.push_back(tr);
    }
  }
  // Outside the measured clock: the server's counters before and after (warm-up left out).
  result.metrics_before = fetch_metrics(t, opts.client, &result.metrics_error);
  const auto t0 = std::chrono::steady_clock::now();
  if (!plan.items.empty()) result.measured = run_plan(m, t, opts, plan, "measured", progress);
  result.measured_wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.metrics_after = fetch_metrics(t, opts.client, &result.metrics_error);
  result.end_utc = utc_now_iso8601();
  return result;
}

}  // namespace clef::bench

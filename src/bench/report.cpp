#include "bench/report.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "bench/quality.h"
#include "bench/server_batches.h"
#include "bench/stats.h"
#include "bench/svg_plot.h"

namespace clef::bench {

using Json = nlohmann::ordered_json;

namespace {

Json opt(const std::optional<double>& v) {
  return v ? Json(*v) : Json();
}

Json latency_json(const std::vector<double>& v) {
  const LatencySummary s = summarize(v);
  Json j = Json::object();
  j["count"] = s.count;
  j["p50"] = opt(s.p50);
  j["p95"] = opt(s.p95);
  j["mean"] = opt(s.mean);
  j["max"] = opt(s.max);
  j["min"] = opt(s.min);
  return j;
}

Json request_json(const Manifest& m, const RequestRecord& r) {
  Json j = Json::object();
  j["id"] = m.items[r.item].id;
  j["tier"] = m.items[r.item].tier;
  j["traversal"] = r.traversal;
  j["input_tokens"] = r.input_tokens >= 0 ? Json(r.input_tokens) : Json();
  j["latency_ms"] = r.latency_ms;
  if (r.server_total_ms || r.server_queue_ms || r.server_forward_ms)
    j["server_timing"] = {{"total", opt(r.server_total_ms)},
                          {"queue", opt(r.server_queue_ms)},
                          {"forward", opt(r.server_forward_ms)}};
  if (r.server_total_ms) j["overhead_ms"] = r.latency_ms - *r.server_total_ms;
  j["status"] = r.http_status ? Json(r.http_status) : Json();
  j["outcome"] = outcome_name(r.outcome);
  if (!r.error.empty()) j["error"] = r.error;
  j["answer"] = r.answers;
  return j;
}

std::string fmt(const Json& v, const char* spec = "%.1f") {
  if (v.is_null()) return "n/a";
  if (v.is_number_float()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, spec, v.get<double>());
    return buf;
  }
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string pct(const Json& v) {
  if (v.is_null()) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * v.get<double>());
  return buf;
}

// The client - server line of report.md: what the path outside the server's own clock costs.
std::string overhead_line(const Json& r) {
  const std::string head = "Served path: client \u2212 server (Server-Timing total) overhead";
  if (!r.contains("overhead_ms") || r["overhead_ms"]["count"] == 0) {
    const std::string why =
        r.contains("overhead_note") ? r["overhead_note"].get<std::string>() : "no Server-Timing";
    return head + ": n/a, " + why + ".\n";
  }
  const Json& o = r["overhead_ms"];
  const Json& s = r["server_total_ms"];
  std::string line = head + " p50 / p95: " + fmt(o["p50"], "%.2f") + " / " + fmt(o["p95"], "%.2f") +
                     " ms (mean " + fmt(o["mean"], "%.2f") + ", max " + fmt(o["max"], "%.2f") +
                     ", over " + o["count"].dump() +
                     " successful requests); server total p50 / p95: " + fmt(s["p50"], "%.2f") +
                     " / " + fmt(s["p95"], "%.2f") + " ms";
  for (const char* k : {"queue", "forward"}) {
    const std::string key = std::string("server_") + k + "_ms";
    if (r.contains(key) && r[key]["count"] != 0)
      line += std::string(", ") + k + " p50 " + fmt(r[key]["p50"], "%.2f") + " ms";
  }
  return line + ".\n";
}

// Input tokens/s, the server's batches over the measured phase and the GEMM-bound ceiling, where
// the report has them.
std::string throughput_lines(const Json& r) {
  std::string o;
  const Json& tp = r["throughput"];
  if (tp.contains("input_tokens_per_s") && !tp["input_tokens_per_s"].is_null())
    o += "Input tokens: " + fmt(tp["input_tokens_per_s"], "%.0f") + " a second, " +
         fmt(r["input_tokens"]["mean"], "%.1f") + " a request on average.\n";
  if (r.contains("server_batches")) {
    const Json& b = r["server_batches"];
    if (b.contains("error")) {
      o += "Server batches: n/a (" + b["error"].get<std::string>() + ").\n";
    } else {
      o += "Server batches over the measured phase (its /metrics): " + fmt(b["forwards"], "%.0f") +
           " forwards, " + fmt(b["mean_requests_per_forward"], "%.2f") + " requests and " +
           fmt(b["mean_tokens_per_forward"], "%.0f") + " tokens a forward";
      // The cumulative histogram up to the first bucket that holds every forward.
      std::string les, counts;
      for (const auto& h : b["forwards_with_at_most"]) {
        les += (les.empty() ? "" : " / ") + fmt(h["le"], "%g");
        counts += (counts.empty() ? "" : " / ") + fmt(h["forwards"], "%.0f");
        if (h["forwards"] == b["forwards"]) break;
      }
      if (!les.empty())
        o += "; forwards of at most " + les + " requests: " + counts + " of " +
             fmt(b["forwards"], "%.0f");
      o += ". Other clients' requests in that window count too.\n";
    }
  }
  if (r.contains("gemm_bound_ceiling")) {
    const Json& g = r["gemm_bound_ceiling"];
    if (g.contains("error"))
      o += "GEMM-bound ceiling: n/a (" + g["error"].get<std::string>() + ").\n";
    else
      o += "GEMM-bound ceiling: " + fmt(g["floor_tokens_per_s"], "%.0f") + " tokens/s / " +
           fmt(g["mean_input_tokens"], "%.1f") +
           " tokens a request = " + fmt(g["requests_per_s"], "%.2f") + " requests/s; this run " +
           fmt(tp["requests_per_s"], "%.2f") + " = **" + fmt(g["of_ceiling"], "%.3f") +
           "** of it.\n";
  }
  return o;
}

}  // namespace

Json build_report(const ReportInputs& in) {
  const Manifest& m = *in.manifest;
  const CampaignResult& c = *in.campaign;
  Json r = Json::object();
  r["tool"] = "clefserve bench";
  r["clock"] = kClockName;
  r["url"] = in.url;
  r["model"] = in.model;
  r["concurrency"] = in.run.concurrency;
  r["warmup"] = in.run.warmup;
  r["traversals"] = in.run.traversals;
  r["items"] = m.items.size();
  r["planned"] = c.measured.size();

  std::vector<double> ok_latency, ok_tokens;
  std::map<std::string, std::vector<double>> tier_latency;
  std::map<int, std::vector<double>> traversal_latency;
  // Server-Timing: client latency minus the server's total, per request, then summarized (a p50 of
  // differences, not a difference of p50s).
  std::vector<double> overhead, server_total, server_queue, server_forward;
  bool any_server_timing = false;
  size_t successful = 0, decisions = 0;
  std::map<std::string, size_t> by_status;
  size_t n_http = 0, n_transport = 0, n_invalid = 0;
  for (const auto& q : c.measured) {
    traversal_latency[q.traversal];  // a traversal that only failed still gets its (empty) row
    switch (q.outcome) {
      case Outcome::Ok:
        ++successful;
        decisions += m.items[q.item].questions.size();
        ok_latency.push_back(q.latency_ms);
        tier_latency[m.items[q.item].tier].push_back(q.latency_ms);
        traversal_latency[q.traversal].push_back(q.latency_ms);
        any_server_timing = any_server_timing || q.server_timing_sent;
        if (q.server_total_ms) {
          overhead.push_back(q.latency_ms - *q.server_total_ms);
          server_total.push_back(*q.server_total_ms);
        }
        if (q.server_queue_ms) server_queue.push_back(*q.server_queue_ms);
        if (q.server_forward_ms) server_forward.push_back(*q.server_forward_ms);
        if (q.input_tokens >= 0) ok_tokens.push_back(static_cast<double>(q.input_tokens));
        break;
      case Outcome::HttpStatus:
        ++n_http;
        ++by_status[std::to_string(q.http_status)];
        break;
      case Outcome::Transport:
        ++n_transport;
        break;
      case Outcome::InvalidBody:
        ++n_invalid;
        break;
    }
  }
  r["successful"] = successful;
  Json failures = Json::object();
  failures["total"] = n_http + n_transport + n_invalid;
  failures["http_status"] = n_http;
  failures["transport"] = n_transport;
  failures["invalid_body"] = n_invalid;
  failures["by_http_status"] = Json::object();
  for (const auto& [s, n] : by_status) failures["by_http_status"][s] = n;
  r["failures"] = failures;
  size_t warm_failed = 0;
  for (const auto& q : c.warmup) warm_failed += q.outcome != Outcome::Ok;
  r["warmup_failures"] = warm_failed;
  r["successful_latency_ms"] = latency_json(ok_latency);
  Json per_tier = Json::object();
  for (const auto& [tier, v] : tier_latency) per_tier[tier] = latency_json(v);
  r["successful_latency_ms_per_tier"] = per_tier;
  // Each traversal apart: a first pass slower than the later ones (first-seen shapes, lazy setup)
  // must show, not be averaged into the overall figures.
  Json by_traversal = Json::array();
  for (const auto& [tr, v] : traversal_latency) {
    Json row = {{"traversal", tr}};
    const Json summary = latency_json(v);
    for (const auto& [k, x] : summary.items()) row[k] = x;
    by_traversal.push_back(row);
  }
  r["latency_by_traversal"] = by_traversal;
  r["overhead_ms"] = latency_json(overhead);
  if (overhead.empty())
    r["overhead_note"] = any_server_timing ? "the server's Server-Timing had no total metric"
                                           : "server sent no Server-Timing";
  r["server_total_ms"] = latency_json(server_total);
  r["server_queue_ms"] = latency_json(server_queue);
  r["server_forward_ms"] = latency_json(server_forward);
  Json tokens = Json::object();
  tokens["p50"] = opt(nearest_rank(ok_tokens, 50));
  tokens["p95"] = opt(nearest_rank(ok_tokens, 95));
  tokens["max"] =
      ok_tokens.empty() ? Json() : Json(*std::max_element(ok_tokens.begin(), ok_tokens.end()));
  // Token rates only where every successful answer told its input tokens (usage.input_tokens).
  const bool all_tokens = successful > 0 && ok_tokens.size() == successful;
  double token_sum = 0.0;
  for (double t : ok_tokens) token_sum += t;
  tokens["mean"] = all_tokens ? Json(token_sum / successful) : Json();
  tokens["sum"] = all_tokens ? Json(token_sum) : Json();
  r["input_tokens"] = tokens;
  const bool timed = c.measured_wall_s > 0;
  const double rps = timed ? successful / c.measured_wall_s : 0.0;
  Json tp = Json::object();
  tp["wall_s"] = c.measured_wall_s;
  tp["requests_per_s"] = timed ? Json(rps) : Json();
  tp["decisions_per_s"] = timed ? Json(decisions / c.measured_wall_s) : Json();
  tp["input_tokens_per_s"] = all_tokens && timed ? Json(token_sum / c.measured_wall_s) : Json();
  r["throughput"] = tp;
  if (!c.metrics_error.empty())
    r["server_batches"] = {{"error", c.metrics_error}};
  else
    r["server_batches"] = batch_window_json(parse_batch_counters(c.metrics_before),
                                            parse_batch_counters(c.metrics_after));
  if (in.gemm_floor_tokens_per_s) {
    const double floor = *in.gemm_floor_tokens_per_s;
    Json g = {{"floor_tokens_per_s", floor}};
    if (all_tokens && timed) {
      const double ceiling = floor * successful / token_sum;  // floor / mean input tokens
      g["mean_input_tokens"] = token_sum / successful;
      g["requests_per_s"] = ceiling;
      g["of_ceiling"] = rps / ceiling;
    } else {
      g["error"] = "no successful request, or one without usage.input_tokens";
    }
    r["gemm_bound_ceiling"] = g;
  }
  r["cold_start_ms"] = opt(in.cold_start_ms);

  // Quality: each item's first valid measured answer (answers of one server run do not change).
  bool any_expected = false;
  for (const auto& it : m.items) any_expected = any_expected || it.has_expected();
  if (any_expected) {
    std::vector<const Json*> first(m.items.size(), nullptr);
    for (const auto& q : c.measured) {
      if (q.outcome == Outcome::Ok && !first[q.item]) first[q.item] = &q.answers;
    }
    QualityCounts overall;
    std::map<std::string, QualityCounts> tiers;
    for (size_t i = 0; i < m.items.size(); ++i) {
      const QualityCounts qc = score_item(m.items[i], first[i]);
      overall.add(qc);
      tiers[m.items[i].tier].add(qc);
    }
    Json q = quality_json(overall);
    q["per_tier"] = Json::object();
    for (const auto& [tier, qc] : tiers) q["per_tier"][tier] = quality_json(qc);
    r["quality"] = q;
  } else {
    r["quality"] = nullptr;
    r["quality_note"] = "the manifest has no expected values";
  }

  const ServerEvidence& sv = *in.server;
  Json ev = Json::object();
  ev["tool"] = {{"name", "clefserve"}, {"version", CLEF_VERSION}, {"git_commit", CLEF_GIT_COMMIT}};
  ev["server_health"] = sv.health;
  if (!sv.health_error.empty()) ev["server_health_error"] = sv.health_error;
  ev["gpu"] = {{"name", sv.gpu.name},
               {"driver", sv.gpu.driver},
               {"cuda", sv.gpu.cuda},
               {"cublaslt", sv.gpu.cublaslt},
               {"source", sv.gpu.source}};
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(m.path, ec);
  ev["manifest"] = {{"path", m.path},
                    {"absolute_path", ec ? m.path : absolute.lexically_normal().string()},
                    {"sha256", m.sha256},
                    {"items", m.items.size()}};
  ev["model"] = in.model;
  ev["clock"] = kClockName;
  ev["warmup"] = in.run.warmup;
  ev["concurrency"] = in.run.concurrency;
  ev["traversals"] = in.run.traversals;
  ev["start_time"] = c.start_utc;
  ev["end_time"] = c.end_utc;
  if (!in.spawn_command.empty()) ev["spawn_command"] = in.spawn_command;
  const auto missing = missing_evidence(ev);
  r["evidence"] = ev;
  r["evidence_complete"] = missing.empty();
  r["evidence_missing"] = missing;

  Json warm = Json::array();
  for (const auto& q : c.warmup) warm.push_back(request_json(m, q));
  r["warmup_requests"] = warm;
  Json reqs = Json::array();
  for (const auto& q : c.measured) reqs.push_back(request_json(m, q));
  r["requests"] = reqs;
  return r;
}

std::string report_markdown(const Json& r) {
  const Json& lat = r["successful_latency_ms"];
  const Json& f = r["failures"];
  const Json& ev = r["evidence"];
  std::string o;
  o += "| clock | C | warm-up | traversals | planned | successful | failures "
       "(http/transport/invalid) | "
       "p50 ms | p95 ms | mean ms | max ms | req/s | decisions/s | cold start ms |\n";
  o += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  o += "| " + r["clock"].get<std::string>() + " | " + r["concurrency"].dump() + " | " +
       r["warmup"].dump() + " | " + r["traversals"].dump() + " | " + r["planned"].dump() + " | " +
       r["successful"].dump() + " | " + f["total"].dump() + " (" + f["http_status"].dump() + "/" +
       f["transport"].dump() + "/" + f["invalid_body"].dump() + ") | " + fmt(lat["p50"]) + " | " +
       fmt(lat["p95"]) + " | " + fmt(lat["mean"]) + " | " + fmt(lat["max"]) + " | " +
       fmt(r["throughput"]["requests_per_s"], "%.2f") + " | " +
       fmt(r["throughput"]["decisions_per_s"], "%.2f") + " | " + fmt(r["cold_start_ms"]) + " |\n";
  o += "\n" + overhead_line(r);
  o += throughput_lines(r);
  if (r.contains("latency_by_traversal") && r["latency_by_traversal"].size() > 1) {
    o += "\n| traversal | successful | p50 ms | p95 ms | mean ms | max ms |\n"
         "|---|---|---|---|---|---|\n";
    for (const auto& t : r["latency_by_traversal"])
      o += "| " + t["traversal"].dump() + " | " + t["count"].dump() + " | " + fmt(t["p50"]) +
           " | " + fmt(t["p95"]) + " | " + fmt(t["mean"]) + " | " + fmt(t["max"]) + " |\n";
  }
  if (r["successful_latency_ms_per_tier"].size() > 1) {
    o +=
        "\n| tier | successful | p50 ms | p95 ms | mean ms | max ms |\n|---|---|---|---|---|---|\n";
    for (const auto& [tier, t] : r["successful_latency_ms_per_tier"].items())
      o += "| " + tier + " | " + t["count"].dump() + " | " + fmt(t["p50"]) + " | " + fmt(t["p95"]) +
           " | " + fmt(t["mean"]) + " | " + fmt(t["max"]) + " |\n";
  }
  if (r["quality"].is_object()) {
    o += "\n| quality | choice_acc | noul_acc | score_acc | score_mae | scored (choice/noul/score) "
         "| "
         "unanswered |\n|---|---|---|---|---|---|---|\n";
    auto row = [&](const std::string& name, const Json& q) {
      o += "| " + name + " | " + pct(q["choice_acc"]) + " | " + pct(q["noul_acc"]) + " | " +
           pct(q["score_acc"]) + " | " + fmt(q["score_mae"], "%.4f") + " | " +
           q["n_choice"].dump() + "/" + q["n_noul"].dump() + "/" + q["n_score"].dump() + " | " +
           q["unanswered"].dump() + " |\n";
    };
    row("overall", r["quality"]);
    for (const auto& [tier, q] : r["quality"]["per_tier"].items()) row(tier, q);
  }
  const Json& h = ev["server_health"];
  auto hs = [&](const char* k) {
    return h.is_object() && h.contains(k) ? fmt(h[k]) : std::string("unknown");
  };
  o += "\nEvidence: clefserve " + ev["tool"]["version"].get<std::string>() + " (" +
       ev["tool"]["git_commit"].get<std::string>() + "); server backend " + hs("backend") +
       ", device " + hs("device") + ", dtype " + hs("dtype") + ", kernels " + hs("kernels") +
       ", revision " + hs("model_revision") + ", weights verified " +
       hs("weights_sha256_verified") + ", server version " + hs("version") + "; GPU " +
       ev["gpu"]["name"].get<std::string>() + ", driver " + ev["gpu"]["driver"].get<std::string>() +
       ", CUDA " + ev["gpu"]["cuda"].get<std::string>() + ", cuBLASLt " +
       ev["gpu"].value("cublaslt", std::string(kUnknown)) + "; model " +
       ev["model"].get<std::string>() + "; manifest " + ev["manifest"]["path"].get<std::string>() +
       " (sha256 " + ev["manifest"]["sha256"].get<std::string>() + ", " +
       ev["manifest"]["items"].dump() + " items); " + ev["start_time"].get<std::string>() + " to " +
       ev["end_time"].get<std::string>() + ".\n";
  if (!r["evidence_complete"].get<bool>())
    o += "\n**Evidence incomplete**: unknown " + r["evidence_missing"].dump() + ".\n";
  return o;
}

std::string report_svg(const Json& r) {
  std::vector<LatencyPoint> pts;
  for (const auto& q : r["requests"]) {
    if (q["outcome"] != "ok") continue;
    LatencyPoint p;
    p.latency_ms = q["latency_ms"].get<double>();
    p.input_tokens = q["input_tokens"].is_number() ? q["input_tokens"].get<double>() : -1.0;
    p.tier = q["tier"].get<std::string>();
    pts.push_back(p);
  }
  const std::string title = "clefserve bench: " + r["model"].get<std::string>() + " at " +
                            r["url"].get<std::string>() + ", concurrency " +
                            r["concurrency"].dump();
  const std::string sub =
      "clock " + r["clock"].get<std::string>() + "; " + r["successful"].dump() + " successful of " +
      r["planned"].dump() + " planned (" + r["failures"]["total"].dump() + " failed), warm-up " +
      r["warmup"].dump() + " excluded; " + r["evidence"]["start_time"].get<std::string>();
  return latency_svg(pts, title, sub);
}

void write_report_files(const Json& report, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create " + dir + ": " + ec.message());
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::ofstream f(path, std::ios::binary);
    f << text;
    f.close();
    if (!f) throw std::runtime_error("cannot write " + path);
  };
  // replace: error excerpts of server bodies may hold invalid UTF-8; the report must still be
  // written.
  write("report.json", report.dump(2, ' ', false, Json::error_handler_t::replace) + "\n");
  write("report.md", report_markdown(report));
  write("latency.svg", report_svg(report));
}

}  // namespace clef::bench

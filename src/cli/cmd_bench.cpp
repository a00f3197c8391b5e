// `clefserve bench`: the Public231-style campaign against a running (or --spawn'ed) server, and
// `clefserve bench compare` for answer drift between two runs (docs/spec/benchmark.md).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "bench/compare.h"
#include "bench/evidence.h"
#include "bench/manifest.h"
#include "bench/report.h"
#include "bench/runner.h"
#include "bench/spawn.h"
#include "bench/target.h"
#include "cli/commands.h"

namespace clef::cli {

namespace {

struct BenchArgs {
  std::string url, manifest, model, out = "bench-out", api_key, spawn, tier_key;
  int concurrency = 1, warmup = 5, traversals = 3;
  double timeout_s = 120.0, spawn_timeout_s = 600.0;
  std::optional<double> gemm_floor_tokens_per_s;
};

struct CompareArgs {
  std::string a, b;
  bench::CompareGates gates;
};

nlohmann::ordered_json read_json_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open");
  std::ostringstream buf;
  buf << f.rdbuf();
  try {
    return nlohmann::ordered_json::parse(buf.str());
  } catch (const nlohmann::ordered_json::exception& e) {
    throw std::runtime_error(path + ": not JSON (" + e.what() + ")");
  }
}

int run_bench(const BenchArgs& a) {
  const bench::Target target = bench::parse_target(a.url);
  bench::RunOptions run;
  run.concurrency = a.concurrency;
  run.warmup = a.warmup;
  run.traversals = a.traversals;
  run.client.timeout_s = a.timeout_s;
  run.client.api_key = a.api_key;

  std::unique_ptr<bench::SpawnedServer> server;
  std::optional<double> cold_start_ms;
  if (!a.spawn.empty()) {
    // Something already answering there would be measured instead of the spawned server.
    {
      bench::ClientOptions quick = run.client;
      quick.timeout_s = 2.0;
      if (auto res = bench::make_client(target, quick)->Get(target.health_path().c_str()))
        throw bench::SpawnError("--spawn: a server already answers at " + target.url + " (HTTP " +
                                std::to_string(res->status) + "); stop it or use another port");
    }
    std::filesystem::create_directories(a.out);
    const std::string log = (std::filesystem::path(a.out) / "server.log").string();
    std::fprintf(stderr, "bench: spawning server (output in %s): %s\n", log.c_str(),
                 a.spawn.c_str());
    server = std::make_unique<bench::SpawnedServer>(a.spawn, log);
    try {
      cold_start_ms = server->wait_healthy(target, run.client, a.spawn_timeout_s);
    } catch (const bench::SpawnError& e) {
      throw bench::SpawnError(std::string(e.what()) + " (its output: " + log + ")");
    }
    std::fprintf(stderr, "bench: server healthy after %.1f ms (cold start)\n", *cold_start_ms);
  }
  const bench::ServerEvidence evidence = bench::gather_server_evidence(target, run.client);
  if (!evidence.health_error.empty())
    std::fprintf(stderr, "bench: warning: %s\n", evidence.health_error.c_str());

  bench::ManifestOptions mopts;
  mopts.tier_key = a.tier_key;
  mopts.override_model = !a.model.empty();
  if (!a.model.empty()) {
    mopts.model = a.model;
  } else if (evidence.health.is_object() && evidence.health.contains("model") &&
             evidence.health["model"].is_string()) {
    mopts.model = evidence.health["model"].get<std::string>();  // the name the server serves
  }
  const bench::Manifest manifest = bench::load_manifest(a.manifest, mopts);
  std::fprintf(stderr,
               "bench: %zu items from %s; %d warm-up, %d traversal(s), concurrency %d -> %s\n",
               manifest.items.size(), a.manifest.c_str(), a.warmup, a.traversals, a.concurrency,
               target.url.c_str());

  const bench::CampaignResult campaign = bench::run_campaign(manifest, target, run, stderr);
  if (server)
    std::fprintf(stderr, "bench: stopping the spawned server: %s\n", server->stop().c_str());

  bench::ReportInputs in;
  in.manifest = &manifest;
  in.campaign = &campaign;
  in.server = &evidence;
  in.url = a.url;
  in.model = mopts.model;
  in.run = run;
  in.cold_start_ms = cold_start_ms;
  in.spawn_command = a.spawn;
  in.gemm_floor_tokens_per_s = a.gemm_floor_tokens_per_s;
  const nlohmann::ordered_json report = bench::build_report(in);
  bench::write_report_files(report, a.out);
  const std::string md = bench::report_markdown(report);
  std::fwrite(md.data(), 1, md.size(), stdout);
  std::fprintf(stderr, "bench: wrote %s/report.json, report.md, latency.svg\n", a.out.c_str());
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<BenchArgs>();
  auto cmp = std::make_shared<CompareArgs>();
  auto* cmd =
      app.add_subcommand("bench", "Benchmark a System One server: latency, quality, evidence");
  cmd->require_subcommand(0, 1);
  cmd->add_option("--url", args->url, "Server base URL, e.g. http://127.0.0.1:8000");
  cmd->add_option("--manifest", args->manifest, "JevBench or {id, request, expected} JSONL file")
      ->check(CLI::ExistingFile);
  cmd->add_option("--model", args->model,
                  "Model name sent in requests (default: the server's /health model)");
  cmd->add_option("--concurrency", args->concurrency, "Closed-loop workers")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--warmup", args->warmup, "Warm-up requests (not counted)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--traversals", args->traversals, "Passes over all items")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--out", args->out, "Report directory")->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "Sent as Authorization: Bearer KEY");
  cmd->add_option("--timeout", args->timeout_s, "Per-request timeout in seconds")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
  cmd->add_option("--spawn", args->spawn,
                  "Start the server with this shell command; stop it after");
  cmd->add_option("--spawn-timeout", args->spawn_timeout_s,
                  "Seconds to wait for /health after --spawn")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--gemm-floor-tokens-per-s", args->gemm_floor_tokens_per_s,
                  "The GEMM floor's tokens/s at this run's batch size (clefserve profile "
                  "--batch): the report adds the GEMM-bound ceiling and this run's fraction of it")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--tier-key", args->tier_key,
                  "Item tier: a record field, or id-prefix (default: tier, else split, else all)");

  auto* compare = cmd->add_subcommand(
      "compare", "Answer drift between two bench reports (exit 1: a gate failed)");
  compare->add_option("a", cmp->a, "First report.json")->required()->check(CLI::ExistingFile);
  compare->add_option("b", cmp->b, "Second report.json")->required()->check(CLI::ExistingFile);
  compare->add_option("--max-probability-drift", cmp->gates.max_probability_drift)
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  compare->add_option("--max-score-drift", cmp->gates.max_score_drift)
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  compare->add_option("--max-flips", cmp->gates.max_flips)
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  compare->add_flag("--b-subset", cmp->gates.b_subset,
                    "b ran a sub-manifest of a's: a's items b never asked for are left out");
  compare->callback([cmp, &exit_code] {
    try {
      const auto res =
          bench::compare_reports(read_json_file(cmp->a), read_json_file(cmp->b), cmp->gates);
      const std::string text = bench::compare_summary(res, cmp->gates);
      std::fwrite(text.data(), 1, text.size(), stdout);
      exit_code = res.passed() ? 0 : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "clefserve bench compare: %s\n", e.what());
      exit_code = 1;
    }
  });

  cmd->callback([cmd, compare, args, &exit_code] {
    if (compare->parsed()) return;
    if (args->url.empty() || args->manifest.empty()) {
      std::fprintf(stderr,
                   "clefserve bench: --url and --manifest are required (or use `bench compare`)\n");
      exit_code = 2;
      return;
    }
    try {
      exit_code = run_bench(*args);
    } catch (const bench::UrlError& e) {
      std::fprintf(stderr, "clefserve bench: %s\n", e.what());
      exit_code = 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "clefserve bench: %s\n", e.what());
      exit_code = 1;
    }
    (void)cmd;
  });
}

}  // namespace clef::cli

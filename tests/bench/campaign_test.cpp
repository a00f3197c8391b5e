// End-to-end bench runs against the real tiny-model server (`clefserve serve --model tiny-r2`):
// quality against the fixtures' reference answers (100%) and deliberately wrong labels (0%),
// `compare` on two identical runs (pass) and a perturbed copy (fail), the report's fields and
// counts with --spawn, and an unreachable server giving counted failures.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "bench/stats.h"
#include "bench_helpers.h"

namespace clef::bench {
namespace {

using Json = nlohmann::ordered_json;

using namespace clef::bench::testing;

// Expected values taken from the reference implementation's own responses (reference_fp32): noul
// "yes" when its p(true) > 0.5, choice its chosen key, score the argmax of its unrounded
// probabilities.
Json reference_expected(const Json& question, const Json& ref_answer, const Json& ref_probs) {
  const std::string type = question["type"];
  if (type == "noul") return ref_answer["noul"].get<double>() > 0.5 ? "yes" : "no";
  if (type == "choice") return ref_answer["choice"];
  int best = 0;
  double bp = -1;
  for (size_t i = 0; i < question["criteria"].size(); ++i) {
    const double p = ref_probs[std::to_string(i)].get<double>();
    if (p > bp) {
      bp = p;
      best = static_cast<int>(i);
    }
  }
  return best;
}

// Any expectation the reference did NOT give.
Json wrong_expected(const Json& question, const Json& right) {
  const std::string type = question["type"];
  if (type == "noul") return right == "yes" ? "no" : "yes";
  if (type == "choice") {
    for (const auto& [key, v] : question["criteria"].items())
      if (key != right.get<std::string>()) return key;
  }
  return (right.get<int>() + 1) % static_cast<int>(question["criteria"].size());
}

struct Counts {
  int noul = 0, choice = 0, score = 0;
};

// Writes the two manifests from tiny-r2.expected.jsonl. Lines with their own max_length are left
// out: the reference cut their state to that length, the server runs at its default --max-length.
Counts write_manifests(const std::string& right_path, const std::string& wrong_path) {
  std::ifstream in(source_path("tests/golden/models/tiny-r2.expected.jsonl"));
  std::string line, right, wrong;
  Counts c;
  int n = 0;
  while (std::getline(in, line)) {
    const Json rec = Json::parse(line);
    if (rec.contains("max_length")) continue;
    const Json& req = rec["request"];
    const Json& ref = rec["reference_fp32"];
    Json good = Json::object(), bad = Json::object();
    for (const auto& [qid, q] : req["questions"].items()) {
      good[qid] = reference_expected(q, ref["response"]["answers"][qid], ref["probabilities"][qid]);
      bad[qid] = wrong_expected(q, good[qid]);
      const std::string t = q["type"];
      (t == "noul" ? c.noul : t == "choice" ? c.choice : c.score)++;
    }
    const std::string id = "tiny-r2-" + std::to_string(n++);
    const std::string tier = n % 2 ? "odd" : "even";
    right += Json{{"id", id}, {"tier", tier}, {"request", req}, {"expected", good}}.dump() + "\n";
    wrong += Json{{"id", id}, {"tier", tier}, {"request", req}, {"expected", bad}}.dump() + "\n";
  }
  write_file(right_path, right);
  write_file(wrong_path, wrong);
  return c;
}

class BenchAgainstTinyServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(temp_dir("suite"));
    counts_ = new Counts(write_manifests(*dir_ + "/right.jsonl", *dir_ + "/wrong.jsonl"));
    port_ = free_port();
    server_ = start_tiny_server(port_, *dir_ + "/server.log").release();
  }
  // Runs the bench once per name (ctest runs each test in its own process: only what a test needs).
  static int run(const std::string& name, const std::string& manifest) {
    static std::map<std::string, int> done;
    if (!done.count(name))
      done[name] = run_cli("bench --manifest " + *dir_ + "/" + manifest + " --out " + *dir_ + "/" +
                               name + " --url " + url_of(port_) + " --warmup 1 --traversals 1",
                           *dir_ + "/" + name);
    return done[name];
  }
  static void TearDownTestSuite() {
    delete server_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete counts_;
  }
  static std::string* dir_;
  static Counts* counts_;
  static int port_;
  static SpawnedServer* server_;
};

std::string* BenchAgainstTinyServer::dir_ = nullptr;
Counts* BenchAgainstTinyServer::counts_ = nullptr;
int BenchAgainstTinyServer::port_ = 0;
SpawnedServer* BenchAgainstTinyServer::server_ = nullptr;

TEST_F(BenchAgainstTinyServer, ReferenceAnswersScoreFullMarks) {
  ASSERT_EQ(run("a", "right.jsonl"), 0) << read_file(*dir_ + "/a.err");
  const Json r = read_json(*dir_ + "/a/report.json");
  EXPECT_EQ(r["failures"]["total"], 0) << r["requests"].dump();
  EXPECT_EQ(r["successful"], r["planned"]);
  const Json& q = r["quality"];
  EXPECT_EQ(q["n_choice"], counts_->choice);
  EXPECT_EQ(q["n_noul"], counts_->noul);
  EXPECT_EQ(q["n_score"], counts_->score);
  EXPECT_GT(counts_->choice, 0);
  EXPECT_GT(counts_->noul, 0);
  EXPECT_GT(counts_->score, 0);
  EXPECT_EQ(q["choice_acc"], 1.0);
  EXPECT_EQ(q["noul_acc"], 1.0);
  EXPECT_EQ(q["score_acc"], 1.0);
  EXPECT_EQ(q["unanswered"], 0);
  EXPECT_GT(q["score_mae"].get<double>(),
            0.0);  // sum i*p_i is not the argmax level on a random model
  ASSERT_TRUE(q["per_tier"].contains("odd"));
  ASSERT_TRUE(q["per_tier"].contains("even"));
  EXPECT_EQ(q["per_tier"]["odd"]["choice_acc"], 1.0);
  EXPECT_EQ(
      q["per_tier"]["odd"]["n_choice"].get<int>() + q["per_tier"]["even"]["n_choice"].get<int>(),
      counts_->choice);
}

TEST_F(BenchAgainstTinyServer, WrongLabelsScoreZero) {
  ASSERT_EQ(run("w", "wrong.jsonl"), 0) << read_file(*dir_ + "/w.err");
  const Json r = read_json(*dir_ + "/w/report.json");
  EXPECT_EQ(r["failures"]["total"], 0);
  const Json& q = r["quality"];
  EXPECT_EQ(q["choice_acc"], 0.0);
  EXPECT_EQ(q["noul_acc"], 0.0);
  EXPECT_EQ(q["score_acc"], 0.0);
  EXPECT_EQ(q["n_choice"], counts_->choice);
  EXPECT_EQ(q["n_noul"], counts_->noul);
  EXPECT_EQ(q["n_score"], counts_->score);
}

TEST_F(BenchAgainstTinyServer, CompareIdenticalRunsPassesPerturbedFails) {
  ASSERT_EQ(run("a", "right.jsonl"), 0) << read_file(*dir_ + "/a.err");
  ASSERT_EQ(run("b", "right.jsonl"), 0) << read_file(*dir_ + "/b.err");
  const std::string a = *dir_ + "/a/report.json", b = *dir_ + "/b/report.json";
  EXPECT_EQ(run_cli("bench compare " + a + " " + b, *dir_ + "/cmp"), 0)
      << read_file(*dir_ + "/cmp.out");
  EXPECT_NE(read_file(*dir_ + "/cmp.out").find("PASS"), std::string::npos);

  // Perturb one probability of one choice answer by 0.01 (keeping its sum): drift gate fails.
  Json p = read_json(b);
  bool done = false;
  for (auto& req : p["requests"]) {
    for (auto& [qid, ans] : req["answer"].items()) {
      if (done || ans["type"] != "choice") continue;
      auto& probs = ans["probabilities"];
      auto it = probs.begin();
      const std::string k0 = it.key(), k1 = (++it).key();
      probs[k0] = probs[k0].get<double>() + 0.01;
      probs[k1] = probs[k1].get<double>() - 0.01;
      done = true;
    }
  }
  ASSERT_TRUE(done);
  write_file(*dir_ + "/perturbed.json", p.dump());
  EXPECT_EQ(run_cli("bench compare " + a + " " + *dir_ + "/perturbed.json", *dir_ + "/cmp2"), 1);
  EXPECT_NE(read_file(*dir_ + "/cmp2.out").find("FAIL: probability drift"), std::string::npos)
      << read_file(*dir_ + "/cmp2.out");
  // ... and passes once the gate allows that much drift.
  EXPECT_EQ(
      run_cli("bench compare " + a + " " + *dir_ + "/perturbed.json --max-probability-drift 0.02",
              *dir_ + "/cmp3"),
      0)
      << read_file(*dir_ + "/cmp3.out");
  // A flipped noul decision fails the flip gate.
  Json f = read_json(b);
  for (auto& req : f["requests"]) {
    for (auto& [qid, ans] : req["answer"].items()) {
      if (ans["type"] == "noul") ans["noul"] = ans["noul"].get<double>() > 0.5 ? 0.1 : 0.9;
    }
  }
  write_file(*dir_ + "/flipped.json", f.dump());
  EXPECT_EQ(run_cli("bench compare " + a + " " + *dir_ + "/flipped.json --max-probability-drift 1",
                    *dir_ + "/cmp4"),
            1);
  EXPECT_NE(read_file(*dir_ + "/cmp4.out").find("decision flip"), std::string::npos);
}

// JevBench records, --spawn, warm-up, two traversals, concurrency 2: every field and count of the
// report.
TEST(BenchReport, FieldsAndCountsWithSpawn) {
  const std::string dir = temp_dir("fields");
  std::string manifest;
  const char* tiers[] = {"easy", "hard", "easy"};
  for (int i = 0; i < 3; ++i) {
    Json rec =
        Json::parse(R"({"family": "f", "question": {"type": "choice", "instructions": "Which team?",
        "criteria": {"billing": "Billing", "security": "Security"}}, "labels": ["billing", "security"],
        "expected": "security", "split": "public"})");
    rec["id"] = "item-" + std::to_string(i);
    rec["state"] =
        "The refund for invoice " + std::to_string(100 + i) + " failed twice this morning.";
    rec["tier"] = tiers[i];
    manifest += rec.dump() + "\n";
  }
  write_file(dir + "/m.jsonl", manifest);
  const int port = free_port();
  const int rc =
      run_cli("bench --url " + url_of(port) + " --manifest " + dir + "/m.jsonl --out " + dir +
                  "/out --warmup 2 --traversals 2 --concurrency 2 --model clef-flash "
                  "--gemm-floor-tokens-per-s 1000 --spawn \"" +
                  serve_command(port) + "\"",
              dir + "/run");
  ASSERT_EQ(rc, 0) << read_file(dir + "/run.err");
  const Json r = read_json(dir + "/out/report.json");
  EXPECT_EQ(r["clock"], "post_to_body_json_and_schema_validation");
  EXPECT_EQ(r["concurrency"], 2);
  EXPECT_EQ(r["warmup"], 2);
  EXPECT_EQ(r["traversals"], 2);
  EXPECT_EQ(r["planned"], 6);
  EXPECT_EQ(r["successful"], 6);
  EXPECT_EQ(r["failures"]["total"], 0);
  for (const char* k : {"http_status", "transport", "invalid_body"})
    EXPECT_EQ(r["failures"][k], 0) << k;
  EXPECT_EQ(r["warmup_requests"].size(), 2u);
  EXPECT_EQ(r["warmup_failures"], 0);
  ASSERT_EQ(r["requests"].size(), 6u);
  std::vector<double> lat;
  for (size_t i = 0; i < 6; ++i) {
    const Json& q = r["requests"][i];
    EXPECT_EQ(q["id"], "item-" + std::to_string(i % 3));
    EXPECT_EQ(q["tier"], tiers[i % 3]);
    EXPECT_EQ(q["traversal"], static_cast<int>(i / 3));
    EXPECT_EQ(q["status"], 200);
    EXPECT_EQ(q["outcome"], "ok");
    EXPECT_GT(q["input_tokens"].get<int>(), 10);
    EXPECT_GT(q["latency_ms"].get<double>(), 0.0);
    EXPECT_EQ(q["answer"]["decision"]["type"], "choice");
    lat.push_back(q["latency_ms"]);
  }
  double tokens = 0;
  for (const auto& q : r["requests"]) tokens += q["input_tokens"].get<double>();
  EXPECT_DOUBLE_EQ(r["input_tokens"]["sum"].get<double>(), tokens);
  EXPECT_DOUBLE_EQ(r["input_tokens"]["mean"].get<double>(), tokens / 6);
  const double wall = r["throughput"]["wall_s"].get<double>();
  EXPECT_DOUBLE_EQ(r["throughput"]["input_tokens_per_s"].get<double>(), tokens / wall);
  // The server's own counters over the measured phase: the 6 measured requests (the 2 warm-up ones
  // left out), in 3 to 6 forwards of at most 2 requests (two closed-loop workers), and the same
  // tokens its answers reported.
  const Json& sb = r["server_batches"];
  ASSERT_FALSE(sb.contains("error")) << sb.dump();
  EXPECT_EQ(sb["requests"].get<double>(), 6);
  EXPECT_DOUBLE_EQ(sb["tokens"].get<double>(), tokens);
  const double forwards = sb["forwards"].get<double>();
  EXPECT_GE(forwards, 3);
  EXPECT_LE(forwards, 6);
  EXPECT_DOUBLE_EQ(sb["mean_requests_per_forward"].get<double>(), 6 / forwards);
  EXPECT_GT(sb["forward_seconds"].get<double>(), 0.0);
  EXPECT_EQ(sb["forwards_with_at_most"].back()["le"], "+Inf");
  EXPECT_EQ(sb["forwards_with_at_most"].back()["forwards"].get<double>(), forwards);
  EXPECT_EQ(sb["forwards_with_at_most"][1]["le"].get<double>(), 2.0);
  EXPECT_EQ(sb["forwards_with_at_most"][1]["forwards"].get<double>(), forwards);
  // --gemm-floor-tokens-per-s 1000: the ceiling is 1000 tokens/s over the mean request's tokens.
  const Json& g = r["gemm_bound_ceiling"];
  const double rps = r["throughput"]["requests_per_s"].get<double>();
  EXPECT_EQ(g["floor_tokens_per_s"].get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(g["requests_per_s"].get<double>(), 1000.0 / (tokens / 6));
  EXPECT_NEAR(g["of_ceiling"].get<double>(), rps / (1000.0 / (tokens / 6)), 1e-12);
  const Json& l = r["successful_latency_ms"];
  EXPECT_EQ(l["count"], 6);
  EXPECT_EQ(l["p50"].get<double>(), *nearest_rank(lat, 50));
  EXPECT_EQ(l["p95"].get<double>(),
            *std::max_element(lat.begin(), lat.end()));  // rank ceil(5.7) = 6
  EXPECT_EQ(l["max"].get<double>(), *std::max_element(lat.begin(), lat.end()));
  EXPECT_LE(l["p50"].get<double>(), l["p95"].get<double>());
  EXPECT_GT(r["throughput"]["requests_per_s"].get<double>(), 0.0);
  EXPECT_EQ(r["throughput"]["decisions_per_s"],
            r["throughput"]["requests_per_s"]);  // one question each
  EXPECT_GT(r["cold_start_ms"].get<double>(), 0.0);
  EXPECT_TRUE(r["successful_latency_ms_per_tier"].contains("easy"));
  EXPECT_EQ(r["successful_latency_ms_per_tier"]["hard"]["count"], 2);
  EXPECT_EQ(r["quality"]["n_choice"], 3);  // one answer per item
  EXPECT_TRUE(r["quality"]["per_tier"].contains("hard"));

  const Json& ev = r["evidence"];
  EXPECT_EQ(ev["tool"]["version"], CLEF_VERSION);
  EXPECT_EQ(ev["tool"]["git_commit"], CLEF_GIT_COMMIT);
  EXPECT_EQ(ev["server_health"]["status"], "ok");
  EXPECT_EQ(ev["server_health"]["backend"], "cpu");
  EXPECT_EQ(ev["model"], "clef-flash");
  for (const char* k : {"name", "driver", "cuda"}) EXPECT_TRUE(ev["gpu"][k].is_string()) << k;
  EXPECT_EQ(ev["manifest"]["path"], dir + "/m.jsonl");
  EXPECT_EQ(ev["manifest"]["items"], 3);
  // The manifest hash as coreutils computes it.
  const std::string sha_cmd = "sha256sum '" + dir + "/m.jsonl' > '" + dir + "/sha'";
  ASSERT_EQ(std::system(sha_cmd.c_str()), 0);
  EXPECT_EQ(ev["manifest"]["sha256"], read_file(dir + "/sha").substr(0, 64));
  EXPECT_EQ(ev["clock"], r["clock"]);
  EXPECT_EQ(ev["start_time"].get<std::string>().size(), 24u);  // 2026-11-29T20:07:30.147Z
  EXPECT_EQ(ev["start_time"].get<std::string>().back(), 'Z');
  EXPECT_LE(ev["start_time"].get<std::string>(), ev["end_time"].get<std::string>());
  EXPECT_TRUE(r["evidence_complete"].is_boolean());
  // The tiny fixture has no revision: the report must say its evidence is incomplete and why.
  EXPECT_EQ(r["evidence_complete"].get<bool>(), r["evidence_missing"].empty());

  const std::string md = read_file(dir + "/out/report.md");
  EXPECT_NE(md.find("| post_to_body_json_and_schema_validation | 2 | 2 | 2 | 6 | 6 | 0 (0/0/0) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("GEMM-bound ceiling: 1000 tokens/s"), std::string::npos) << md;
  EXPECT_NE(md.find("Server batches over the measured phase"), std::string::npos) << md;
  EXPECT_NE(md.find("Input tokens: "), std::string::npos) << md;
  const std::string svg = read_file(dir + "/out/latency.svg");
  EXPECT_NE(svg.find("latency (ms)"), std::string::npos);
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '<'), std::count(svg.begin(), svg.end(), '>'));
  EXPECT_NE(read_file(dir + "/out/server.log").find("POST"), std::string::npos);
  // The spawned server was stopped: nothing answers on its port any more.
  auto cli = make_client(parse_target(url_of(port)), ClientOptions{1.0, ""});
  EXPECT_FALSE(cli->Get("/health"));
  std::filesystem::remove_all(dir);
}

TEST(BenchReport, UnreachableServerGivesCountedTransportFailures) {
  const std::string dir = temp_dir("down");
  write_file(dir + "/m.jsonl",
             R"({"id": "a", "state": "s", "question": {"type": "noul"}, "expected": "no"})"
             "\n"
             R"({"id": "b", "state": "t", "question": {"type": "noul"}})"
             "\n");
  const int rc = run_cli("bench --url " + url_of(free_port()) + " --manifest " + dir +
                             "/m.jsonl --out " + dir +
                             "/out --warmup 1 --traversals 2 --timeout 2 "
                             "--gemm-floor-tokens-per-s 48000",
                         dir + "/run");
  ASSERT_EQ(rc, 0) << read_file(dir + "/run.err");
  const Json r = read_json(dir + "/out/report.json");
  EXPECT_EQ(r["planned"], 4);
  EXPECT_EQ(r["successful"], 0);
  EXPECT_EQ(r["failures"]["transport"], 4);
  EXPECT_EQ(r["failures"]["total"], 4);
  EXPECT_TRUE(r["successful_latency_ms"]["p50"].is_null());
  EXPECT_EQ(r["evidence"]["server_health"], "unknown");
  EXPECT_FALSE(r["evidence_complete"].get<bool>());
  EXPECT_EQ(r["quality"]["unanswered"], 1);
  // No counters, no token rate, no ceiling: each says why instead of a number.
  EXPECT_EQ(r["server_batches"]["error"].get<std::string>().rfind("GET /metrics: transport", 0), 0u)
      << r["server_batches"].dump();
  EXPECT_TRUE(r["throughput"]["input_tokens_per_s"].is_null());
  EXPECT_TRUE(r["gemm_bound_ceiling"].contains("error"));
  EXPECT_FALSE(r["gemm_bound_ceiling"].contains("of_ceiling"));
  EXPECT_NE(read_file(dir + "/out/report.md").find("GEMM-bound ceiling: n/a"), std::string::npos);
  EXPECT_NE(read_file(dir + "/out/report.md").find("Evidence incomplete"), std::string::npos);
  EXPECT_NE(read_file(dir + "/out/latency.svg").find("no successful requests"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_F(BenchAgainstTinyServer, SpawnRefusesAPortThatAlreadyAnswers) {
  const int rc =
      run_cli("bench --url " + url_of(port_) + " --manifest " + *dir_ + "/right.jsonl --out " +
                  *dir_ + "/sp --spawn \"" + serve_command(port_) + "\"",
              *dir_ + "/sp");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(read_file(*dir_ + "/sp.err").find("already answers"), std::string::npos)
      << read_file(*dir_ + "/sp.err");
}

TEST(BenchCli, SpawnedServerThatDiesIsAClearError) {
  const std::string dir = temp_dir("dies");
  write_file(dir + "/m.jsonl", R"({"id": "a", "state": "s", "question": {"type": "noul"}})"
                               "\n");
  const int rc =
      run_cli("bench --url " + url_of(free_port()) + " --manifest " + dir + "/m.jsonl --out " +
                  dir + "/out --spawn \"echo no model here >&2; exit 3\"",
              dir + "/run");
  EXPECT_EQ(rc, 1);
  const std::string err = read_file(dir + "/run.err");
  EXPECT_NE(err.find("exited with status 3 before /health answered 200"), std::string::npos) << err;
  EXPECT_NE(read_file(dir + "/out/server.log").find("no model here"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(BenchCli, UsageErrors) {
  const std::string dir = temp_dir("usage");
  EXPECT_EQ(
      run_cli("bench --manifest " + source_path("manifests/public231-shape.jsonl"), dir + "/u1"),
      2);
  EXPECT_NE(read_file(dir + "/u1.err").find("--url and --manifest are required"),
            std::string::npos);
  EXPECT_EQ(
      run_cli("bench --url ftp://x --manifest " + source_path("manifests/public231-shape.jsonl"),
              dir + "/u2"),
      2);
  EXPECT_NE(read_file(dir + "/u2.err").find("scheme must be http or https"), std::string::npos);
  write_file(dir + "/bad.jsonl", "{\"id\": 1}\n");
  EXPECT_EQ(
      run_cli("bench --url http://127.0.0.1:1 --manifest " + dir + "/bad.jsonl --out " + dir + "/o",
              dir + "/u3"),
      1);
  EXPECT_NE(read_file(dir + "/u3.err").find("bad.jsonl:1:"), std::string::npos)
      << read_file(dir + "/u3.err");
  // A floor of 0 tokens/s would make every ceiling 0: refused before anything runs.
  EXPECT_EQ(
      run_cli("bench --url http://127.0.0.1:1 --manifest " +
                  source_path("manifests/public231-shape.jsonl") + " --gemm-floor-tokens-per-s 0",
              dir + "/u4"),
      2);
  EXPECT_NE(read_file(dir + "/u4.err").find("--gemm-floor-tokens-per-s"), std::string::npos)
      << read_file(dir + "/u4.err");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace clef::bench

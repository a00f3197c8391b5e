// Tokenizer speed: a ~16k-token English state with the Qwen3 tokenizer, one
// thread, with a cold merge cache (cleared before every run) and a warm one; plus the
// tokenizer.json load.
#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "tokenizer/tokenizer.h"

namespace {

using clef::tokenizer::Tokenizer;

const std::string kQwen3 =
    std::string(CLEF_SOURCE_DIR) + "/tests/golden/tokenizers/qwen3/tokenizer.json";

const char* const kWords[] = {"the",
                              "customer",
                              "reports",
                              "that",
                              "checkout",
                              "page",
                              "returns",
                              "an",
                              "error",
                              "after",
                              "payment",
                              "is",
                              "submitted",
                              "and",
                              "support",
                              "team",
                              "has",
                              "asked",
                              "for",
                              "logs",
                              "from",
                              "last",
                              "week",
                              "billing",
                              "account",
                              "was",
                              "charged",
                              "twice",
                              "refund",
                              "requested",
                              "by",
                              "email",
                              "on",
                              "Monday",
                              "outage",
                              "affected",
                              "several",
                              "regions",
                              "including",
                              "Europe",
                              "Asia",
                              "service",
                              "restored",
                              "within",
                              "two",
                              "hours",
                              "engineer",
                              "investigated",
                              "database",
                              "connection",
                              "timeout",
                              "during",
                              "peak",
                              "traffic",
                              "user",
                              "cannot",
                              "log",
                              "in",
                              "password",
                              "reset",
                              "link",
                              "expired",
                              "before",
                              "they",
                              "could",
                              "use",
                              "it",
                              "order",
                              "shipped",
                              "late",
                              "because",
                              "warehouse",
                              "inventory",
                              "count",
                              "wrong",
                              "manager",
                              "approved",
                              "credit",
                              "note",
                              "invoice",
                              "shows",
                              "incorrect",
                              "tax",
                              "amount",
                              "subscription",
                              "renewal",
                              "failed",
                              "card",
                              "declined",
                              "bank",
                              "confirmed",
                              "funds",
                              "available",
                              "mobile",
                              "app",
                              "crashes",
                              "when",
                              "opening",
                              "settings",
                              "screen",
                              "version",
                              "latest",
                              "update",
                              "install",
                              "feature",
                              "request",
                              "export",
                              "report",
                              "spreadsheet",
                              "format",
                              "would",
                              "help",
                              "quarterly",
                              "review",
                              "meeting",
                              "scheduled",
                              "next",
                              "Tuesday",
                              "contract",
                              "legal",
                              "department",
                              "needs",
                              "signature",
                              "vendor",
                              "security",
                              "audit",
                              "found",
                              "vulnerability",
                              "in",
                              "authentication",
                              "flow",
                              "patch",
                              "deployed",
                              "yesterday",
                              "evening",
                              "monitoring",
                              "alerts",
                              "stopped",
                              "firing",
                              "dashboard",
                              "displays",
                              "stale",
                              "data",
                              "cache",
                              "invalidation",
                              "bug",
                              "suspected",
                              "priority",
                              "high",
                              "low",
                              "medium",
                              "urgent",
                              "ticket",
                              "escalated",
                              "to",
                              "tier",
                              "second",
                              "level",
                              "agent",
                              "replied",
                              "with",
                              "workaround",
                              "clear",
                              "browser",
                              "cookies",
                              "try",
                              "again",
                              "issue",
                              "persists",
                              "other",
                              "users",
                              "same",
                              "company",
                              "also",
                              "affected",
                              "region",
                              "latency",
                              "increased",
                              "sharply",
                              "network",
                              "provider",
                              "maintenance",
                              "window",
                              "announced",
                              "in",
                              "advance",
                              "notification",
                              "missed",
                              "please",
                              "advise",
                              "how",
                              "proceed",
                              "thank",
                              "you",
                              "very",
                              "much",
                              "quick",
                              "response",
                              "we",
                              "appreciate",
                              "your",
                              "patience",
                              "while",
                              "our",
                              "engineers",
                              "work",
                              "resolution",
                              "estimated",
                              "time",
                              "unknown",
                              "this",
                              "moment",
                              "will",
                              "provide",
                              "updates",
                              "every",
                              "hour",
                              "until",
                              "fixed",
                              "discount",
                              "offered",
                              "compensation",
                              "inconvenience",
                              "caused",
                              "customers",
                              "satisfied",
                              "partially",
                              "complaint",
                              "about",
                              "rude",
                              "behaviour",
                              "phone",
                              "call",
                              "recorded",
                              "quality",
                              "assurance",
                              "training",
                              "purposes",
                              "policy",
                              "states",
                              "refunds",
                              "processed",
                              "within",
                              "thirty",
                              "days",
                              "purchase",
                              "receipt",
                              "attached",
                              "photo",
                              "damaged",
                              "package",
                              "courier",
                              "tracking",
                              "number",
                              "shows",
                              "delivered",
                              "but",
                              "nothing",
                              "arrived",
                              "neighbour",
                              "checked",
                              "doorstep",
                              "empty"};
constexpr size_t kWordCount = sizeof(kWords) / sizeof(kWords[0]);
const char* const kSuffixes[] = {"", "", "", "s", "ed", "ing", "ly", "er"};

// Deterministic English-like JSON state (rendered the way the encoder renders states). Varied word
// forms, capitals, numbers and ids give a realistic number of distinct words for the cold-cache
// case.
std::string make_state(size_t records) {
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  auto sentence = [&](size_t words) {
    std::string s;
    for (size_t i = 0; i < words; ++i) {
      // Zipf-like: square the uniform draw to favour the early, common words.
      double u = static_cast<double>(next() % 1000000) / 1e6;
      std::string w = kWords[static_cast<size_t>(u * u * kWordCount) % kWordCount];
      w += kSuffixes[next() % 8];
      if (i == 0 || next() % 23 == 0)
        w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
      if (i > 0) s += ' ';
      s += w;
      if (next() % 11 == 0) s += ',';
      if (next() % 37 == 0) {
        s += ' ';
        s += std::to_string(next() % 100000);
      }
    }
    s += '.';
    return s;
  };
  std::string out = "{\"tickets\": [";
  auto num = [&](uint64_t mod) { out += std::to_string(next() % mod); };
  for (size_t r = 0; r < records; ++r) {
    if (r > 0) out += ", ";
    out += "{\"id\": \"TCK-";
    num(900000);
    out += "\", \"customer\": \"";
    out += sentence(2);
    out += "\", \"opened\": \"2026-0";
    num(9);
    out += "-1";
    num(10);
    out += "T0";
    num(10);
    out += ":3";
    num(10);
    out += ":00Z\", \"subject\": \"";
    out += sentence(8);
    out += "\", \"body\": \"";
    for (int k = 0; k < 4; ++k) {
      if (k > 0) out += ' ';
      out += sentence(12 + next() % 12);
    }
    out += "\", \"amount\": ";
    num(5000);
    out += '.';
    num(100);
    out += '}';
  }
  out += "]}";
  return out;
}

struct Fixture {
  Tokenizer tok = Tokenizer::load(kQwen3);
  std::string text = make_state(75);
};

Fixture& fixture() {
  static Fixture f;  // loaded once per benchmark program
  return f;
}

void BM_Encode16kCold(benchmark::State& state) {
  Fixture& f = fixture();
  size_t tokens = 0;
  for (auto _ : state) {
    state.PauseTiming();
    f.tok.clear_cache();
    state.ResumeTiming();
    auto ids = f.tok.encode(f.text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["bytes"] = static_cast<double>(f.text.size());
}
BENCHMARK(BM_Encode16kCold)->Unit(benchmark::kMillisecond);

void BM_Encode16kWarm(benchmark::State& state) {
  Fixture& f = fixture();
  f.tok.encode(f.text);
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = f.tok.encode(f.text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_Encode16kWarm)->Unit(benchmark::kMillisecond);

void BM_LoadQwen3TokenizerJson(benchmark::State& state) {
  for (auto _ : state) {
    Tokenizer tok = Tokenizer::load(kQwen3);
    benchmark::DoNotOptimize(tok.vocab_size());
  }
}
BENCHMARK(BM_LoadQwen3TokenizerJson)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();

// Encoding a 64-question System One request with the Qwen3 tokenizer:
// validate + piecewise tokenization + spans, from an already parsed body; plus the same from raw
// bytes (parse included), and with a cold tokenizer word cache.
#include <benchmark/benchmark.h>

#include <string>

#include "encoding/encode.h"
#include "encoding/request.h"
#include "json/value.h"
#include "tokenizer/tokenizer.h"

namespace {

const clef::tokenizer::Tokenizer& qwen3() {
  static const clef::tokenizer::Tokenizer tok = clef::tokenizer::Tokenizer::load(
      CLEF_SOURCE_DIR "/tests/golden/tokenizers/qwen3/tokenizer.json");
  return tok;
}

// 64 questions (22 choice with 4-6 options, 21 score with 5 levels, 21 noul) and a ~700-word state.
std::string request_text() {
  const char* words[] = {"checkout", "fails",  "for",       "customers", "since",   "the",
                         "morning",  "refund", "duplicate", "charge",    "billing", "page",
                         "regional", "outage", "approval",  "policy",    "support", "reports"};
  std::string state = "Ticket #4821: ";
  for (int i = 0; i < 700; ++i) state += std::string(words[(i * 7 + i / 5) % 18]) + " ";
  std::string body =
      R"({"model":"clef-flash","state":{"ticket":")" + state +
      R"(","amount":129.95,"tags":["payments","eu"],"customer":{"tier":"gold","id":912}},"questions":{)";
  for (int q = 0; q < 64; ++q) {
    if (q) body += ",";
    body += "\"field_" + std::to_string(q) + "\":";
    if (q % 3 == 0) {
      body += R"({"type":"choice","instructions":"Which team should handle ticket aspect )" +
              std::to_string(q) + R"(?","criteria":{)";
      int n = 4 + q % 3;
      for (int o = 0; o < n; ++o)
        body += (o ? "," : "") + std::string("\"team_") + std::to_string(o) + "\":\"Handles " +
                words[(q + o) % 18] + " and " + words[(q * o + 3) % 18] + " issues\"";
      body += "}}";
    } else if (q % 3 == 1) {
      body += R"({"type":"score","instructions":"How urgent is aspect )" + std::to_string(q) +
              R"(?","criteria":["Can wait","This week","Today","Within the hour","Now"]})";
    } else {
      body += R"({"type":"noul","instructions":"Does the ticket mention a )" +
              std::string(words[q % 18]) + R"( problem?"})";
    }
  }
  return body + "}}";
}

clef::json::Value parsed() {
  clef::json::ParseError err;
  return *clef::json::parse(request_text(), &err);
}

void BM_Encode64Questions(benchmark::State& state) {
  const auto& tok = qwen3();
  const clef::json::Value body = parsed();
  size_t tokens = 0;
  for (auto _ : state) {
    auto req = clef::encoding::validate_request(body);
    auto enc = clef::encoding::encode_request(req, tok, {});
    tokens = enc.input_ids.size();
    benchmark::DoNotOptimize(enc.input_ids.data());
  }
  state.counters["input_tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_Encode64Questions)->Unit(benchmark::kMillisecond);

void BM_ParseEncode64Questions(benchmark::State& state) {
  const auto& tok = qwen3();
  const std::string text = request_text();
  for (auto _ : state) {
    clef::json::ParseError err;
    auto body = clef::json::parse(text, &err);
    auto enc = clef::encoding::encode_request(clef::encoding::validate_request(*body), tok, {});
    benchmark::DoNotOptimize(enc.input_ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_ParseEncode64Questions)->Unit(benchmark::kMillisecond);

void BM_Encode64QuestionsColdCache(benchmark::State& state) {
  const auto& tok = qwen3();
  const clef::json::Value body = parsed();
  for (auto _ : state) {
    state.PauseTiming();
    tok.clear_cache();
    state.ResumeTiming();
    auto enc = clef::encoding::encode_request(clef::encoding::validate_request(body), tok, {});
    benchmark::DoNotOptimize(enc.input_ids.data());
  }
}
BENCHMARK(BM_Encode64QuestionsColdCache)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

// CPU float32 engine latency. Model from $CLEF_BENCH_MODEL (a release folder; default: the tiny-r2
// fixture), e.g. for the ~0.5B preset:
//   clefserve make-model --preset small --out /tmp/small
//   CLEF_BENCH_MODEL=/tmp/small build/microbench/bench_cpu_engine --benchmark_filter=Forward/1024
// The GDN recurrence micro-benchmark uses Clef-flash head sizes and needs no model.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <string>

#include "engine/cpu/backbone.h"
#include "engine/cpu/cpu_engine.h"
#include "engine/cpu/gated_deltanet.h"
#include "engine/cpu/joint_head.h"

namespace {

std::shared_ptr<const clef::model::Release> bench_release() {
  static std::shared_ptr<const clef::model::Release> release = [] {
    const char* dir = std::getenv("CLEF_BENCH_MODEL");
    const std::string path =
        dir ? dir : std::string(CLEF_SOURCE_DIR) + "/tests/golden/models/tiny-r2";
    return clef::model::Release::load(path);
  }();
  return release;
}

// T random ids with one noul-like question (question span + 2 option spans) near the end.
clef::encoding::EncodedRequest synthetic_request(const clef::model::Release& r, int T) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> id(0, r.text.vocab_size - 1);
  clef::encoding::EncodedRequest enc;
  for (int t = 0; t < T; ++t) enc.input_ids.push_back(id(rng));
  clef::encoding::EncodedQuestion q;
  q.id = "q";
  q.question_span = {T - 40, T - 30};
  q.option_spans = {{T - 28, T - 22}, {T - 20, T - 14}};
  q.option_ids = {"true", "false"};
  enc.questions.push_back(q);
  return enc;
}

void BM_Forward(benchmark::State& state) {
  auto release = bench_release();
  clef::engine::cpu::CpuEngine engine(release, 0);
  const auto enc = synthetic_request(*release, static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(engine.run(enc));
  state.counters["tok/s"] = benchmark::Counter(
      static_cast<double>(state.range(0)) * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Forward)->Arg(128)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_JointHead(benchmark::State& state) {
  auto release = bench_release();
  const int T = static_cast<int>(state.range(0));
  const auto enc = synthetic_request(*release, T);
  const std::vector<float> hidden = clef::engine::cpu::run_backbone(*release, enc.input_ids);
  for (auto _ : state)
    benchmark::DoNotOptimize(clef::engine::cpu::run_joint_head(*release, hidden.data(), T, enc));
}
BENCHMARK(BM_JointHead)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

// Sequential gated delta rule at Clef-flash sizes (Hk 16, Hv 32, dk = dv = 128), one layer.
void BM_GatedDeltaRuleFlash(benchmark::State& state) {
  const int T = static_cast<int>(state.range(0)), Hk = 16, Hv = 32, d = 128;
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.0f, 0.1f);
  std::vector<float> q(static_cast<size_t>(T) * Hk * d), k(q.size()),
      v(static_cast<size_t>(T) * Hv * d), g(static_cast<size_t>(T) * Hv, -0.1f),
      beta(g.size(), 0.5f), o(v.size());
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = n(rng);
  for (auto _ : state) {
    clef::engine::cpu::gated_delta_rule(q.data(), k.data(), v.data(), g.data(), beta.data(), T, Hk,
                                        Hv, d, d, o.data(), 0);
    benchmark::DoNotOptimize(o.data());
  }
}
BENCHMARK(BM_GatedDeltaRuleFlash)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

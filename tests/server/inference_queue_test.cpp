// The InferenceQueue with several real CPU engines (what `serve --device cuda:0,cuda:1,...` builds
// with GPUs): every request answered as one engine alone answers it, and as the reference does;
// batches spread over the workers; stop() drains; an engine's error fails only its batch.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "answer/answer.h"
#include "encoding/encode.h"
#include "encoding/request.h"
#include "engine/engine.h"
#include "engine/golden_models.h"
#include "engine/pipeline.h"
#include "server/inference_queue.h"
#include "server/metrics.h"

namespace clef {
namespace {

using server::InferenceQueue;
using server::QueueEngine;
using server::QueueOptions;
using server::QueueResult;

struct Golden {
  std::vector<testing::GoldenRecord> records;
  std::vector<encoding::EncodedRequest> encoded;  // one per record
};

const Golden& golden() {
  static const Golden g = [] {
    Golden out;
    auto release = testing::load_golden_model("tiny-r2");
    out.records = testing::load_golden("tiny-r2");
    for (const auto& r : out.records)
      out.encoded.push_back(encoding::encode_request(encoding::validate_request(r.request),
                                                     *release->tokenizer,
                                                     testing::golden_encode_options(r)));
    return out;
  }();
  return g;
}

// n CPU engines of one thread each (the tiny model needs no more), labelled cpu:0, cpu:1, ...
std::vector<QueueEngine> cpu_engines(size_t n) {
  std::vector<QueueEngine> out;
  engine::EngineOptions eo;
  eo.threads = 1;
  for (size_t i = 0; i < n; ++i)
    out.push_back(QueueEngine{"cpu:" + std::to_string(i),
                              engine::create_engine(testing::load_golden_model("tiny-r2"), eo)});
  return out;
}

std::vector<std::string> labels(const std::vector<QueueEngine>& engines) {
  std::vector<std::string> out;
  for (const auto& e : engines) out.push_back(e.device);
  return out;
}

// Every job of `rounds` passes over the golden requests, submitted at once; the answers in order.
std::vector<QueueResult> run_all(InferenceQueue& q, int rounds) {
  const Golden& g = golden();
  std::vector<std::future<QueueResult>> futures;
  for (int r = 0; r < rounds; ++r)
    for (const auto& enc : g.encoded) {
      auto f = q.submit(enc);
      EXPECT_TRUE(f.has_value()) << "queue full";
      if (f) futures.push_back(std::move(*f));
    }
  std::vector<QueueResult> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

void expect_answers_as_one_engine(size_t n_engines) {
  const Golden& g = golden();
  // One engine alone, each request on its own: what every queued answer must equal exactly (the
  // engines are identical and an answer does not depend on its batch company).
  auto alone = cpu_engines(1);
  std::vector<engine::ForwardOutput> expected;
  for (const auto& enc : g.encoded) expected.push_back(alone[0].engine->forward({&enc}).at(0));

  auto engines = cpu_engines(n_engines);
  server::Metrics metrics(labels(engines));
  QueueOptions qo;
  qo.max_queue = 256;
  qo.max_batch_tokens = 512;  // several requests per batch, never all of them
  InferenceQueue q(engines, qo, metrics);
  constexpr int kRounds = 2;
  const std::vector<QueueResult> results = run_all(q, kRounds);
  ASSERT_EQ(results.size(), kRounds * g.encoded.size());
  std::set<size_t> used;
  for (size_t i = 0; i < results.size(); ++i) {
    const size_t k = i % g.encoded.size();
    SCOPED_TRACE("job " + std::to_string(i) + ", golden line " + std::to_string(g.records[k].line));
    used.insert(results[i].engine_index);
    ASSERT_LT(results[i].engine_index, n_engines);
    const auto& got = results[i].output.logits;
    ASSERT_EQ(got.size(), expected[k].logits.size());
    for (size_t qi = 0; qi < got.size(); ++qi) {
      EXPECT_EQ(got[qi], expected[k].logits[qi]) << "question " << qi;
      // And the oracle's probabilities (Cloudflare's float32 run), as the one-engine tests check.
      const auto& question = g.encoded[k].questions[qi];
      const std::vector<float> p = answer::softmax_f32(got[qi]);
      for (size_t j = 0; j < p.size(); ++j)
        EXPECT_NEAR(p[j], g.records[k].probabilities.at(question.id).at(question.option_ids[j]),
                    1e-4);
    }
  }
  // The jobs were all queued at once: every free worker took batches.
  EXPECT_EQ(used.size(), n_engines) << "some engine ran no batch";
  const std::string text = metrics.render({});
  for (size_t i = 0; i < n_engines; ++i)
    EXPECT_NE(text.find("clef_batches_total{device=\"cpu:" + std::to_string(i) + "\"} "),
              std::string::npos)
        << text;
}

TEST(InferenceQueueEngines, TwoEnginesAnswerEveryRequestAsOneEngineDoes) {
  expect_answers_as_one_engine(2);
}

TEST(InferenceQueueEngines, ThreeEnginesAnswerEveryRequestAsOneEngineDoes) {
  expect_answers_as_one_engine(3);
}

TEST(InferenceQueueEngines, BatchesFollowTheTokenBudgetOnEveryWorker) {
  const Golden& g = golden();
  auto engines = cpu_engines(3);
  server::Metrics metrics(labels(engines));
  QueueOptions qo;
  qo.max_queue = 256;
  qo.max_batch_tokens = 1;  // every request is longer: each runs alone
  InferenceQueue q(engines, qo, metrics);
  const std::vector<QueueResult> results = run_all(q, 3);
  ASSERT_EQ(results.size(), 3 * g.encoded.size());
  std::vector<size_t> per_engine(3, 0);
  for (const auto& r : results) {
    EXPECT_EQ(r.batch_size, 1u);
    ++per_engine.at(r.engine_index);
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_GT(per_engine[i], 0u) << "engine " << i << " ran nothing";
  // The per-device series add up to every job, one pass each.
  const std::string text = metrics.render({});
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NE(text.find("clef_batches_total{device=\"cpu:" + std::to_string(i) + "\"} " +
                        std::to_string(per_engine[i]) + "\n"),
              std::string::npos)
        << text;
}

TEST(InferenceQueueEngines, StopRunsEveryQueuedJobThenJoinsAllWorkers) {
  const Golden& g = golden();
  auto engines = cpu_engines(2);
  server::Metrics metrics(labels(engines));
  QueueOptions qo;
  qo.max_queue = 256;
  qo.max_batch_tokens = 1;
  InferenceQueue q(engines, qo, metrics);
  std::vector<std::future<QueueResult>> futures;
  for (int r = 0; r < 3; ++r)
    for (const auto& enc : g.encoded) futures.push_back(*q.submit(enc));
  q.stop();  // returns once the queue is empty and both workers have exited
  EXPECT_EQ(q.depth(), 0u);
  for (auto& f : futures) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    EXPECT_FALSE(f.get().output.logits.empty());
  }
  EXPECT_FALSE(q.submit(g.encoded[0]).has_value()) << "a stopped queue took work";
  q.stop();  // idempotent
}

TEST(InferenceQueueEngines, AnEngineErrorFailsOnlyItsBatch) {
  const Golden& g = golden();
  auto engines = cpu_engines(2);
  server::Metrics metrics(labels(engines));
  QueueOptions qo;
  qo.max_queue = 256;
  qo.max_batch_tokens = 1;  // each request alone: the bad one's batch is itself
  InferenceQueue q(engines, qo, metrics);
  // A real engine error: an id outside the vocabulary (the CPU engine refuses it by throwing).
  encoding::EncodedRequest bad = g.encoded[0];
  bad.input_ids.back() =
      static_cast<int32_t>(testing::load_golden_model("tiny-r2")->text.vocab_size);
  std::vector<std::future<QueueResult>> good, failed;
  for (int r = 0; r < 2; ++r) {
    for (const auto& enc : g.encoded) good.push_back(*q.submit(enc));
    failed.push_back(*q.submit(bad));
  }
  for (auto& f : failed) EXPECT_THROW(f.get(), std::runtime_error);
  std::set<size_t> used;
  for (auto& f : good) {
    const QueueResult r = f.get();  // throws if it shared the failure
    EXPECT_FALSE(r.output.logits.empty());
    used.insert(r.engine_index);
  }
  // Both workers survive their engine's errors and keep serving.
  const std::vector<QueueResult> after = run_all(q, 2);
  EXPECT_EQ(after.size(), 2 * g.encoded.size());
  EXPECT_EQ(used.size(), 2u);
}

// An engine with a pipeline of its own whose device work the test holds: await_device(t) blocks
// until the test opens batch t; the outputs are the CPU engine's. It logs the pipeline calls.
class GatedEngine final : public engine::Engine, public engine::ForwardPipeline {
 public:
  GatedEngine() : cpu_(cpu_engines(1).at(0).engine) {}
  std::vector<engine::ForwardOutput> forward(
      const std::vector<const encoding::EncodedRequest*>& batch) override {
    return cpu_->forward(batch);
  }
  engine::EngineInfo info() const override { return cpu_->info(); }
  engine::ForwardPipeline* native_pipeline() override { return this; }
  Ticket begin(const std::vector<const encoding::EncodedRequest*>& batch) override {
    auto out = cpu_->forward(batch);
    std::lock_guard<std::mutex> lock(m_);
    outputs_.push_back(std::move(out));
    log_.push_back("begin " + std::to_string(outputs_.size()) + " of " +
                   std::to_string(batch.size()));
    cv_.notify_all();
    return outputs_.size();
  }
  void await_device(Ticket t) override {
    std::unique_lock<std::mutex> lock(m_);
    log_.push_back("await " + std::to_string(t));
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_ >= t; });
  }
  std::vector<engine::ForwardOutput> end(Ticket t) override {
    std::lock_guard<std::mutex> lock(m_);
    log_.push_back("end " + std::to_string(t));
    return outputs_.at(t - 1);
  }
  void open(Ticket t) {
    std::lock_guard<std::mutex> lock(m_);
    open_ = t;
    cv_.notify_all();
  }
  // Waits (up to 10 s) until the log ends with `line`; the log so far.
  std::vector<std::string> wait_for(const std::string& line) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait_for(lock, std::chrono::seconds(10),
                 [&] { return !log_.empty() && log_.back() == line; });
    return log_;
  }

 private:
  std::shared_ptr<engine::Engine> cpu_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::string> log_;
  std::vector<std::vector<engine::ForwardOutput>> outputs_;
  Ticket open_ = 0;
};

// The worker's order with a pipelined engine: the next batch is taken only once the device has
// finished the previous one (so it holds every request queued meanwhile, in one batch), and it
// begins before the previous batch ends (whose answers then go out while the device works).
TEST(InferenceQueueEngines, PipelinedWorkerTakesWhatQueuedDuringTheDeviceWork) {
  const Golden& g = golden();
  auto gated = std::make_shared<GatedEngine>();
  server::Metrics metrics({"gated"});
  QueueOptions qo;
  qo.max_queue = 16;
  qo.max_batch_tokens = 1 << 20;
  InferenceQueue q({QueueEngine{"gated", gated}}, qo, metrics);
  auto a = *q.submit(g.encoded[0]);
  EXPECT_EQ(gated->wait_for("await 1"), (std::vector<std::string>{"begin 1 of 1", "await 1"}));
  // Queued while batch 1 is on the device: both go into batch 2.
  auto b = *q.submit(g.encoded[1]);
  auto c = *q.submit(g.encoded[2]);
  EXPECT_EQ(a.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  gated->open(1);
  EXPECT_EQ(
      gated->wait_for("await 2"),
      (std::vector<std::string>{"begin 1 of 1", "await 1", "begin 2 of 2", "end 1", "await 2"}));
  ASSERT_EQ(a.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(b.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  gated->open(100);
  const QueueResult ra = a.get(), rb = b.get(), rc = c.get();
  EXPECT_EQ(ra.batch_size, 1u);
  EXPECT_EQ(rb.batch_size, 2u);
  EXPECT_EQ(rc.batch_size, 2u);
  auto cpu = cpu_engines(1).at(0).engine;
  EXPECT_EQ(ra.output.logits, cpu->forward({&g.encoded[0]}).at(0).logits);
  EXPECT_EQ(rc.output.logits, cpu->forward({&g.encoded[2]}).at(0).logits);
  q.stop();
}

TEST(InferenceQueueEngines, RefusesNoEngine) {
  server::Metrics metrics;
  EXPECT_THROW(InferenceQueue({}, QueueOptions{}, metrics), std::invalid_argument);
  EXPECT_THROW(InferenceQueue({QueueEngine{"cpu", nullptr}}, QueueOptions{}, metrics),
               std::invalid_argument);
}

}  // namespace
}  // namespace clef

// The bounded queue between HTTP threads and the engines: one worker thread per engine (one per
// GPU of `serve --device cuda:0,cuda:1,...`), all taking from the one deque. A request enters only
// after its body was read, parsed and encoded, so a slow client never holds an inference slot. A
// free worker takes queued requests in arrival order, up to max_batch_tokens worth (always at least
// one), into one Engine::forward call on its engine, so a batch goes to the first free engine; the
// engine guarantees answers do not depend on batch company.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "encoding/encode.h"
#include "engine/engine.h"
#include "engine/pipeline.h"
#include "server/metrics.h"

namespace clef::server {

// Tokens per forward pass unless --max-batch-tokens says otherwise: the default request length, so
// the longest default request fits one pass.
inline constexpr size_t kDefaultMaxBatchTokens = encoding::kDefaultMaxLength;

struct QueueOptions {
  size_t max_queue = 64;  // waiting requests; beyond -> submit() refuses (HTTP 429)
  // Tokens per forward pass (a longer request runs alone).
  size_t max_batch_tokens = kDefaultMaxBatchTokens;
};

// The error a job's `done` gets when it was dropped before its batch because its client had gone
// (the cancel flag given to submit() was set while it waited).
class Cancelled : public std::runtime_error {
 public:
  Cancelled() : std::runtime_error("the client closed the connection before its batch") {}
};

// One engine the queue feeds, and the device it runs on ("cpu", "cuda:1": its name in /health and
// its /metrics label).
struct QueueEngine {
  std::string device;
  std::shared_ptr<engine::Engine> engine;
};

// One request's answer and where its time went (the Server-Timing header reports these).
struct QueueResult {
  engine::ForwardOutput output;
  double queue_s = 0;    // submitted -> its batch started
  double forward_s = 0;  // the batch's Engine::forward
  size_t batch_size = 0;
  size_t engine_index = 0;  // which of the queue's engines ran it
};

class InferenceQueue {
 public:
  // At least one engine; `metrics` counts batches per engine (Metrics::observe_batch's index).
  InferenceQueue(std::vector<QueueEngine> engines, QueueOptions opts, Metrics& metrics);
  ~InferenceQueue();  // finishes queued work, then joins the workers
  InferenceQueue(const InferenceQueue&) = delete;
  InferenceQueue& operator=(const InferenceQueue&) = delete;

  // `enc` must outlive the returned future's completion. nullopt: the queue is full.
  std::optional<std::future<QueueResult>> submit(const encoding::EncodedRequest& enc);
  // The same, without a thread waiting: `done` runs on an engine worker thread with the result
  // (error null) or the engine's error (result null); keep it short (hand the work on). `enc` must
  // outlive that call. False: the queue is full (`done` is never called). `cancelled` (optional):
  // once it reads true, the job is dropped when a batch is formed and never reaches the engine;
  // `done` then gets a Cancelled error. A job already in a forward pass runs to its end.
  using Done = std::function<void(QueueResult* result, std::exception_ptr error)>;
  using CancelFlag = std::shared_ptr<const std::atomic<bool>>;
  bool submit(const encoding::EncodedRequest& enc, Done done, CancelFlag cancelled = nullptr);
  size_t depth() const;
  size_t capacity() const { return opts_.max_queue; }
  const std::vector<QueueEngine>& engines() const { return engines_; }
  // Stops taking new work, runs what is queued, joins the workers. Idempotent.
  void stop();

 private:
  struct Job {
    const encoding::EncodedRequest* enc;
    std::chrono::steady_clock::time_point submitted;
    std::promise<QueueResult> result;
    Done done;  // set: called instead of fulfilling `result`
    CancelFlag cancelled;
    bool is_cancelled() const { return cancelled && cancelled->load(); }
    void fail(std::exception_ptr e) {
      if (done) {
        done(nullptr, e);
      } else {
        result.set_exception(e);
      }
    }
  };
  // A batch taken from the queue, from its begin to its end on the worker's pipeline.
  struct Batch {
    std::vector<Job> jobs;
    size_t tokens = 0;
    std::chrono::steady_clock::time_point t0;  // begun
    uint64_t ticket = 0;
    std::exception_ptr error;  // begin() refused it
  };
  void run(size_t index);
  // The queued jobs in arrival order up to the token budget (cancelled ones answered and
  // dropped); waits for one first when `wait`. Nothing: none queued (or stopping, when waiting).
  std::optional<Batch> take(bool wait);
  // The batch's outputs (or its error) to each job, after its metrics.
  void finish(size_t index, engine::ForwardPipeline& pipe, Batch& batch);

  std::vector<QueueEngine> engines_;
  QueueOptions opts_;
  Metrics& metrics_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // workers_[i] runs engines_[i]
};

}  // namespace clef::server

#include "server/inference_queue.h"

#include <chrono>
#include <exception>
#include <stdexcept>
#include <utility>
#include <vector>

#include "engine/pipeline.h"

namespace clef::server {

InferenceQueue::InferenceQueue(std::vector<QueueEngine> engines, QueueOptions opts,
                               Metrics& metrics)
    : engines_(std::move(engines)), opts_(opts), metrics_(metrics) {
  if (engines_.empty()) throw std::invalid_argument("InferenceQueue needs at least one engine");
  for (const auto& e : engines_)
    if (!e.engine) throw std::invalid_argument("InferenceQueue: no engine for " + e.device);
  workers_.reserve(engines_.size());
  for (size_t i = 0; i < engines_.size(); ++i) workers_.emplace_back([this, i] { run(i); });
}

InferenceQueue::~InferenceQueue() {
  stop();
}

std::optional<std::future<QueueResult>> InferenceQueue::submit(
    const encoding::EncodedRequest& enc) {
  std::future<QueueResult> fut;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || jobs_.size() >= opts_.max_queue) return std::nullopt;
    jobs_.push_back(Job{&enc, std::chrono::steady_clock::now(), {}, {}, nullptr});
    fut = jobs_.back().result.get_future();
  }
  cv_.notify_one();
  return fut;
}

bool InferenceQueue::submit(const encoding::EncodedRequest& enc, Done done, CancelFlag cancelled) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || jobs_.size() >= opts_.max_queue) return false;
    jobs_.push_back(
        Job{&enc, std::chrono::steady_clock::now(), {}, std::move(done), std::move(cancelled)});
  }
  cv_.notify_one();
  return true;
}

size_t InferenceQueue::depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return jobs_.size();
}

void InferenceQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
}

// One worker: batches through the engine's pipeline (engine/pipeline.h). The next batch is taken
// once the device has finished the previous one's main work (await_device), so it holds whatever
// was queued meanwhile, and it begins before the previous one ends: on the CUDA engine the
// previous batch's head then runs beside the next backbone, and its answers go out while the GPU
// is busy.
void InferenceQueue::run(size_t index) {
  engine::Engine& eng = *engines_[index].engine;
  std::unique_ptr<engine::ForwardPipeline> serial;
  engine::ForwardPipeline* pipe = eng.native_pipeline();
  if (!pipe) pipe = (serial = engine::serial_pipeline(eng)).get();
  std::optional<Batch> prev;
  for (;;) {
    if (prev && !prev->error) pipe->await_device(prev->ticket);
    std::optional<Batch> cur = take(/*wait=*/!prev);
    if (cur) {
      std::vector<const encoding::EncodedRequest*> inputs;
      inputs.reserve(cur->jobs.size());
      for (const auto& j : cur->jobs) inputs.push_back(j.enc);
      cur->t0 = std::chrono::steady_clock::now();
      try {
        cur->ticket = pipe->begin(inputs);
      } catch (...) {
        cur->error = std::current_exception();
      }
    }
    if (prev) finish(index, *pipe, *prev);
    prev = std::move(cur);
    if (!prev) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_ && jobs_.empty()) return;
    }
  }
}

std::optional<InferenceQueue::Batch> InferenceQueue::take(bool wait) {
  Batch b;
  std::vector<Job> dropped;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (wait) cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    // Arrival order; the first job always runs even when it alone exceeds the token budget. Jobs
    // whose client has gone are taken out on the way, so they cost the batch nothing.
    while (!jobs_.empty()) {
      if (jobs_.front().is_cancelled()) {
        dropped.push_back(std::move(jobs_.front()));
        jobs_.pop_front();
        continue;
      }
      size_t n = jobs_.front().enc->input_ids.size();
      if (!b.jobs.empty() && b.tokens + n > opts_.max_batch_tokens) break;
      b.tokens += n;
      b.jobs.push_back(std::move(jobs_.front()));
      jobs_.pop_front();
    }
    // What the budget left is the next free worker's: wake one (a submit() woke only this one).
    if (!jobs_.empty()) cv_.notify_one();
  }
  if (!dropped.empty()) {
    metrics_.add_dropped(dropped.size());
    const auto err = std::make_exception_ptr(Cancelled());
    for (auto& j : dropped) j.fail(err);
  }
  if (b.jobs.empty()) return std::nullopt;  // nothing queued, or every job had been cancelled
  return b;
}

void InferenceQueue::finish(size_t index, engine::ForwardPipeline& pipe, Batch& batch) {
  std::vector<engine::ForwardOutput> outputs;
  std::exception_ptr err = batch.error;
  if (!err) {
    try {
      outputs = pipe.end(batch.ticket);
      if (outputs.size() != batch.jobs.size()) {
        throw std::runtime_error("engine returned " + std::to_string(outputs.size()) +
                                 " outputs for a batch of " + std::to_string(batch.jobs.size()));
      }
    } catch (...) {
      err = std::current_exception();
    }
  }
  // Record the batch before any caller is woken: a client that reads /metrics right after its
  // answer must see the pass that produced it. Its time runs from its begin to its outputs.
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - batch.t0).count();
  metrics_.observe_batch(index, batch.jobs.size(), batch.tokens, secs);
  // Every request of a failed batch gets the error (HTTP 500, logged with its request id).
  for (size_t i = 0; i < batch.jobs.size(); ++i) {
    Job& job = batch.jobs[i];
    if (err) {
      job.fail(err);
      continue;
    }
    QueueResult r;
    r.output = std::move(outputs[i]);
    r.queue_s = std::chrono::duration<double>(batch.t0 - job.submitted).count();
    r.forward_s = secs;
    r.batch_size = batch.jobs.size();
    r.engine_index = index;
    if (job.done) {
      job.done(&r, nullptr);
    } else {
      job.result.set_value(std::move(r));
    }
  }
}

}  // namespace clef::server

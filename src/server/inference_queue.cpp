#include "server/inference_queue.h"

#include <chrono>
#include <exception>
#include <stdexcept>
#include <utility>
#include <vector>

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

void InferenceQueue::run(size_t index) {
  engine::Engine& eng = *engines_[index].engine;
  for (;;) {
    std::vector<Job> batch, dropped;
    size_t tokens = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping and drained
      // Arrival order; the first job always runs even when it alone exceeds the token budget. Jobs
      // whose client has gone are taken out on the way, so they cost the batch nothing.
      while (!jobs_.empty()) {
        if (jobs_.front().is_cancelled()) {
          dropped.push_back(std::move(jobs_.front()));
          jobs_.pop_front();
          continue;
        }
        size_t n = jobs_.front().enc->input_ids.size();
        if (!batch.empty() && tokens + n > opts_.max_batch_tokens) break;
        tokens += n;
        batch.push_back(std::move(jobs_.front()));
        jobs_.pop_front();
      }
      // What the budget left is the next free worker's: wake one (a submit() woke only this one).
      if (!jobs_.empty()) cv_.notify_one();
    }
    if (!dropped.empty()) {
      metrics_.add_dropped(dropped.size());
      const auto err = std::make_exception_ptr(Cancelled());
      for (auto& j : dropped) {
        if (j.done) {
          j.done(nullptr, err);
        } else {
          j.result.set_exception(err);
        }
      }
    }
    if (batch.empty()) continue;  // every queued job had been cancelled
    std::vector<const encoding::EncodedRequest*> inputs;
    inputs.reserve(batch.size());
    for (const auto& j : batch) inputs.push_back(j.enc);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<engine::ForwardOutput> outputs;
    std::exception_ptr err;
    try {
      outputs = eng.forward(inputs);
      if (outputs.size() != batch.size()) {
        throw std::runtime_error("engine returned " + std::to_string(outputs.size()) +
                                 " outputs for a batch of " + std::to_string(batch.size()));
      }
    } catch (...) {
      err = std::current_exception();
    }
    // Record the batch before any caller is woken: a client that reads /metrics right after its
    // answer must see the pass that produced it.
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    metrics_.observe_batch(index, batch.size(), tokens, secs);
    // Every request of a failed batch gets the error (HTTP 500, logged with its request id).
    for (size_t i = 0; i < batch.size(); ++i) {
      if (err) {
        if (batch[i].done) {
          batch[i].done(nullptr, err);
        } else {
          batch[i].result.set_exception(err);
        }
        continue;
      }
      QueueResult r;
      r.output = std::move(outputs[i]);
      r.queue_s = std::chrono::duration<double>(t0 - batch[i].submitted).count();
      r.forward_s = secs;
      r.batch_size = batch.size();
      r.engine_index = index;
      if (batch[i].done) {
        batch[i].done(&r, nullptr);
      } else {
        batch[i].result.set_value(std::move(r));
      }
    }
  }
}

}  // namespace clef::server

// A fork-join loop over independent items (heads) on up to `threads` std::threads, and a team of
// threads kept for a run of such rounds; no global pool.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace clef::engine::cpu {

inline int resolve_threads(int threads) {
  if (threads > 0) return threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

// Threads worth starting for `flops` of work: starting a thread costs tens of microseconds, so
// small problems (tiny test models) stay on the calling thread.
inline int threads_for(double flops, int threads) {
  constexpr double kMinFlopsPerThread = 4e6;
  return std::max(1,
                  std::min(resolve_threads(threads), static_cast<int>(flops / kMinFlopsPerThread)));
}

// Calls fn(i) for i in [0, n); items are strided over the workers. Rethrows the first exception.
inline void parallel_for(int n, int threads, const std::function<void(int)>& fn) {
  const int workers = std::min(n, resolve_threads(threads));
  if (workers <= 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::exception_ptr> errors(workers);
  std::vector<std::thread> pool;
  pool.reserve(workers);
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      try {
        for (int i = w; i < n; i += workers) fn(i);
      } catch (...) {
        errors[w] = std::current_exception();
      }
    });
  }
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// `size` workers, the calling thread one of them, started once for many fork-join rounds (a
// linear's weight conversion, block after block between its sgemms) rather than once a round.
// run(fn) calls fn(i) for every i in [0, size()), fn(0) on the caller, and returns when all have
// returned; the first exception (lowest i) is rethrown. One caller at a time.
class ThreadTeam {
 public:
  explicit ThreadTeam(int size) : errors_(std::max(1, size)) {
    try {
      for (int i = 1; i < size; ++i) threads_.emplace_back([this, i] { serve(i); });
    } catch (...) {  // a thread the system refused: the started ones are joined, not leaked
      stop();
      throw;
    }
  }
  ~ThreadTeam() { stop(); }
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return static_cast<int>(threads_.size()) + 1; }

  void run(const std::function<void(int)>& fn) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = &fn;
      pending_ = static_cast<int>(threads_.size());
      ++round_;
    }
    start_.notify_all();
    errors_[0] = nullptr;
    try {
      fn(0);
    } catch (...) {
      errors_[0] = std::current_exception();
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [this] { return pending_ == 0; });
      fn_ = nullptr;
    }
    for (std::exception_ptr& e : errors_)
      if (e) std::rethrow_exception(std::exchange(e, nullptr));
  }

 private:
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    start_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  void serve(int index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* fn = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        start_.wait(lock, [&] { return stopping_ || round_ != seen; });
        if (stopping_) return;
        seen = round_;
        fn = fn_;
      }
      // errors_[index] is this worker's alone until it reports done (under the mutex).
      errors_[index] = nullptr;
      try {
        (*fn)(index);
      } catch (...) {
        errors_[index] = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* fn_ = nullptr;
  uint64_t round_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  std::vector<std::exception_ptr> errors_;  // one a worker, read by run() once all are done
  std::vector<std::thread> threads_;
};

}  // namespace clef::engine::cpu

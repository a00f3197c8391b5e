// Independent per-frame / per-image work (decode + resize) on a few threads: a 16-frame video
// decodes in the time of a few frames. Results are written by index, so the output never depends
// on scheduling; the first failure (lowest index) is rethrown.
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

namespace clef::media {

// The most threads parallel_items runs: the hardware's, at most `max_threads`.
inline unsigned parallel_threads(unsigned max_threads = 8) {
  return std::min(std::max(1u, std::thread::hardware_concurrency()), std::max(1u, max_threads));
}

// The threads each of `n` items that parallel_items runs concurrently may use for its own inner
// work (a JPEG decoded in bands), so that together they stay within parallel_threads(): 1 when
// there are at least as many items as threads.
inline unsigned threads_per_item(size_t n, unsigned max_threads = 8) {
  const size_t threads = parallel_threads(max_threads);
  return static_cast<unsigned>(std::max<size_t>(1, threads / std::max<size_t>(n, 1)));
}

// Runs fn(i) for i in [0, n) on up to `max_threads` threads (the caller's among them).
template <typename F>
void parallel_items(size_t n, F&& fn, unsigned max_threads = 8) {
  const size_t threads = std::min<size_t>(n, parallel_threads(max_threads));
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace clef::media

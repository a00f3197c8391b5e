// A fork-join loop over independent items (heads) on up to `threads` std::threads; no global pool.
#pragma once

#include <algorithm>
#include <exception>
#include <functional>
#include <thread>
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

}  // namespace clef::engine::cpu

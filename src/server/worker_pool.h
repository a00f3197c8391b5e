// The server's handler threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace clef::server::detail {

// Handler threads: parse/validate/encode bodies and format answers, never socket I/O. Tasks still
// queued at stop() run before it returns.
class WorkerPool {
 public:
  explicit WorkerPool(int n);
  ~WorkerPool() { stop(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  void post(std::function<void()> task);
  void stop();

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace clef::server::detail

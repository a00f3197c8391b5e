// --spawn: the bench starts the server itself (via /bin/sh, in its own process group), measures its
// cold start (spawn -> first /health 200) apart from request latency, and stops it afterwards.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "bench/target.h"

namespace clef::bench {

struct SpawnError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class SpawnedServer {
 public:
  // Starts `/bin/sh -c command`, its stdout and stderr appended to `log_path` when non-empty (so
  // the server's access log does not bury the bench's progress). Throws SpawnError when fork/open
  // fails.
  explicit SpawnedServer(const std::string& command, const std::string& log_path = "");
  ~SpawnedServer();  // stop()
  SpawnedServer(const SpawnedServer&) = delete;
  SpawnedServer& operator=(const SpawnedServer&) = delete;

  pid_t pid() const { return pid_; }
  // True while the shell (and so the server it runs) has not exited.
  bool running();
  // SIGTERM to the process group, then SIGKILL after `grace_s`. Returns the shell's exit
  // description.
  std::string stop(double grace_s = 10.0);

  // Polls GET /health until 200; returns milliseconds since the spawn. Throws SpawnError when the
  // process exits first or `timeout_s` passes.
  double wait_healthy(const Target& t, const ClientOptions& opts, double timeout_s);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace clef::bench

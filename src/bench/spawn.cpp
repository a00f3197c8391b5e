#include "bench/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace clef::bench {

SpawnedServer::SpawnedServer(const std::string& command, const std::string& log_path) {
  int log_fd = -1;
  if (!log_path.empty()) {
    log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0)
      throw SpawnError("--spawn: cannot open " + log_path + ": " + std::strerror(errno));
  }
  started_ = std::chrono::steady_clock::now();
  pid_ = fork();
  if (pid_ < 0 && log_fd >= 0) close(log_fd);
  if (pid_ < 0) throw SpawnError(std::string("--spawn: fork failed: ") + std::strerror(errno));
  if (pid_ == 0) {
    setpgid(0, 0);  // own group: stop() reaches the server even when the shell forked it
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid_, pid_);  // also from the parent, so the group exists before any kill
  if (log_fd >= 0) close(log_fd);
}

SpawnedServer::~SpawnedServer() {
  stop();
}

bool SpawnedServer::running() {
  if (reaped_) return false;
  const pid_t r = waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

std::string SpawnedServer::stop(double grace_s) {
  if (pid_ <= 0) return "not started";
  if (running()) {
    kill(-pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    while (running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (running()) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, &status_, 0);
      reaped_ = true;
    }
  }
  // The shell is gone; make sure nothing it started outlives it in the group (a no-op when all
  // exited).
  kill(-pid_, SIGKILL);
  pid_ = -1;
  if (WIFEXITED(status_)) return "exited with status " + std::to_string(WEXITSTATUS(status_));
  if (WIFSIGNALED(status_))
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status_));
  return "stopped";
}

double SpawnedServer::wait_healthy(const Target& t, const ClientOptions& opts, double timeout_s) {
  ClientOptions quick = opts;
  quick.timeout_s = 2.0;
  const auto deadline = started_ + std::chrono::duration<double>(timeout_s);
  while (true) {
    if (!running()) {
      std::string how = WIFEXITED(status_)
                            ? "exited with status " + std::to_string(WEXITSTATUS(status_))
                            : "was killed by a signal";
      throw SpawnError("--spawn: the server " + how + " before /health answered 200");
    }
    auto cli = make_client(t, quick);
    auto res = cli->Get(t.health_path().c_str(), request_headers(opts));
    if (res && res->status == 200)
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_)
          .count();
    if (std::chrono::steady_clock::now() > deadline)
      throw SpawnError("--spawn: /health did not answer 200 within " + std::to_string(timeout_s) +
                       " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
}

}  // namespace clef::bench

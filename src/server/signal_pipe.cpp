#include "server/signal_pipe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>

namespace clef::server {

namespace {

// The handler can only reach process-wide state; this is the one such variable.
std::atomic<int> g_write_fd{-1};

extern "C" void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  int fd = g_write_fd.load();
  if (fd >= 0) (void)!write(fd, &b, 1);
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe(std::initializer_list<int> signals)
    : signals_(signals.begin(), signals.end()) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  int expected = -1;
  if (!g_write_fd.compare_exchange_strong(expected, write_fd_)) {
    close(read_fd_);
    close(write_fd_);
    throw std::logic_error("only one SignalPipe may exist at a time");
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : signals_) sigaction(s, &sa, nullptr);
}

SignalPipe::~SignalPipe() {
  for (int s : signals_) signal(s, SIG_DFL);
  g_write_fd = -1;
  close(read_fd_);
  close(write_fd_);
}

int SignalPipe::wait() {
  unsigned char b = 0;
  for (;;) {
    ssize_t n = read(read_fd_, &b, 1);
    if (n == 1) return b;
    if (n < 0 && errno == EINTR) continue;
    return 0;
  }
}

int SignalPipe::wait_for(double seconds) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return -1;
    pollfd p{read_fd_, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (n > 0) return wait();
    if (n < 0 && errno != EINTR) return 0;
  }
}

void SignalPipe::wake() {
  unsigned char b = 0;
  (void)!write(write_fd_, &b, 1);
}

}  // namespace clef::server

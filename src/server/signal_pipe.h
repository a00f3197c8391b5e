// SIGTERM/SIGINT delivered as ordinary data: the handler writes the signal number to a pipe and a
// normal thread reads it, so shutdown never runs inside a signal handler. (Blocking the signals and
// sigwait() is not enough: libraries such as OpenBLAS start threads before main() that would take
// the signal with its default action.)
#pragma once

#include <initializer_list>
#include <vector>

namespace clef::server {

class SignalPipe {
 public:
  // Installs the handler for `signals`. Only one SignalPipe may exist at a time (a signal handler
  // can only reach process-wide state).
  explicit SignalPipe(std::initializer_list<int> signals);
  ~SignalPipe();  // restores the default actions
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // Blocks until a signal arrives (returns its number) or wake() is called (returns 0).
  int wait();
  // Like wait(), but returns -1 when `seconds` pass first.
  int wait_for(double seconds);
  void wake();

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
  std::vector<int> signals_;
};

}  // namespace clef::server

// Running a shell command or the clefserve binary from a test: stdin bytes in, stdout and exit
// status out. Shared by the CLI end-to-end tests of every layer (header-only: each test binary
// includes it, nothing links it).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace clef::testsupport {

struct CliResult {
  int status = -1;  // exit status; -1 when the command could not be started or did not exit
  std::string out;  // everything the command wrote to stdout
};

// Runs `cmd` through /bin/sh and captures its stdout. stderr is left alone: redirect it in `cmd`
// ("2>&1", "2>/dev/null") where a test needs it.
inline CliResult run_command(const std::string& cmd) {
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Runs `CLEF_BINARY <args>` with `stdin_bytes` on its stdin. `args` is shell text (the subcommand,
// its options, and a stderr redirect where wanted). The bytes go through a temp file named per
// process and per call, removed afterwards: ctest runs the tests of one binary in parallel
// processes.
inline CliResult run_clefserve(const std::string& args, const std::string& stdin_bytes) {
  static std::atomic<int> calls{0};
  const std::string in_path = ::testing::TempDir() + "clef_cli_stdin_" + std::to_string(getpid()) +
                              "_" + std::to_string(calls++) + ".bin";
  {
    std::ofstream f(in_path, std::ios::binary);
    f << stdin_bytes;
  }
  CliResult r = run_command(std::string("'") + CLEF_BINARY + "' " + args + " < '" + in_path + "'");
  std::remove(in_path.c_str());
  return r;
}

}  // namespace clef::testsupport

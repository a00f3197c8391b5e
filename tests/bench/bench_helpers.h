// Helpers for the bench tests that run against the real tiny-model server (`clefserve serve`).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/spawn.h"
#include "bench/target.h"

namespace clef::bench::testing {

inline std::string source_path(const std::string& rel) {
  return std::string(CLEF_SOURCE_DIR) + "/" + rel;
}

// A port the kernel just handed out (free now; the server binds it right after).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

inline std::string serve_command(int port) {
  return std::string("exec '") + CLEF_BINARY + "' serve --model '" +
         source_path("tests/golden/models/tiny-r2") + "' --threads 1 --port " +
         std::to_string(port);
}

inline std::string url_of(int port) {
  return "http://127.0.0.1:" + std::to_string(port);
}

// The real server on the tiny-r2 fixture; waits for /health 200 (throws SpawnError otherwise).
inline std::unique_ptr<SpawnedServer> start_tiny_server(int port, const std::string& log) {
  auto s = std::make_unique<SpawnedServer>(serve_command(port), log);
  s->wait_healthy(parse_target(url_of(port)), ClientOptions{}, 120.0);
  return s;
}

inline std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("clef-bench-test-" + std::to_string(getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream b;
  b << f.rdbuf();
  return b.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

// Runs `clefserve ARGS` (stdout and stderr to files under `log_prefix`); returns the exit status.
inline int run_cli(const std::string& args, const std::string& log_prefix) {
  const std::string cmd = std::string("'") + CLEF_BINARY + "' " + args + " >'" + log_prefix +
                          ".out' 2>'" + log_prefix + ".err'";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

inline nlohmann::ordered_json read_json(const std::string& path) {
  return nlohmann::ordered_json::parse(read_file(path));
}

}  // namespace clef::bench::testing

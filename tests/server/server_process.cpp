#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 with -fsanitize=address reports false -Wmaybe-uninitialized inside std::regex's
// std::function members; the sanitizer build is -Werror too.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace clef::server_test {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<char*> c_argv(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::string golden_model(const std::string& name) {
  return std::string(CLEF_SOURCE_DIR) + "/tests/golden/models/" + name;
}

std::vector<std::string> golden_requests(const std::string& name) {
  std::ifstream f(golden_model(name) + ".expected.jsonl");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    // The request object is re-serialised by nlohmann with member order kept (ordered_json), which
    // matters: question order is meaningful.
    auto j = nlohmann::ordered_json::parse(line);
    out.push_back(j.at("request").dump());
  }
  return out;
}

ServerProcess::ServerProcess(const std::vector<std::string>& args,
                             const std::map<std::string, std::string>& env) {
  char tmpl[] = "/tmp/clef_serve_log_XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  log_path_ = tmpl;

  std::vector<std::string> argv{CLEF_BINARY, "serve"};
  if (std::find(args.begin(), args.end(), "--port") == args.end())
    argv.insert(argv.end(), {"--port", "0"});
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> envv;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (!env.count(key) && key != "CLEF_API_KEY") envv.push_back(kv);
  }
  for (const auto& [k, v] : env) envv.push_back(k + "=" + v);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  auto cargv = c_argv(argv);
  auto cenv = c_argv(envv);
  int rc = posix_spawn(&pid_, CLEF_BINARY, &fa, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  close(fd);
  if (rc != 0) throw std::runtime_error("posix_spawn failed");

  // Start-up (load + warm-up) takes well under a second on the tiny model; sanitizer builds are
  // slower, so allow a minute.
  // Text: `... listening url=... port=N ...`; JSON: `..."event":"listening",..."port":N,...`.
  static const std::regex listening(R"re(listening.*port(?:=|":)(\d+))re");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch m;
    std::string text = log();
    if (std::regex_search(text, m, listening)) {
      port_ = std::stoi(m[1]);
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && !exited_) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  if (!log_path_.empty()) unlink(log_path_.c_str());
}

std::string ServerProcess::log() const {
  return read_file(log_path_);
}

void ServerProcess::signal(int sig) const {
  if (pid_ > 0 && !exited_) kill(pid_, sig);
}

int ServerProcess::wait_exit(double timeout_s) {
  if (exited_) return exit_status_;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int run_program(const std::vector<std::string>& args, const std::string& stdin_text,
                std::string* out) {
  char in_tmpl[] = "/tmp/clef_prog_in_XXXXXX";
  char out_tmpl[] = "/tmp/clef_prog_out_XXXXXX";
  int in_fd = mkstemp(in_tmpl);
  int out_fd = mkstemp(out_tmpl);
  if (in_fd < 0 || out_fd < 0) return -1;
  if (write(in_fd, stdin_text.data(), stdin_text.size()) != static_cast<ssize_t>(stdin_text.size()))
    return -1;
  lseek(in_fd, 0, SEEK_SET);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> argv = args;
  auto cargv = c_argv(argv);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in_fd);
  close(out_fd);
  int status = -1;
  if (rc == 0) waitpid(pid, &status, 0);
  *out = read_file(out_tmpl);
  unlink(in_tmpl);
  unlink(out_tmpl);
  if (rc != 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

namespace {

bool send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

size_t parse_response(const std::string& raw, HttpResponse* r) {
  size_t hdr_end = raw.find("\r\n\r\n");
  if (hdr_end == std::string::npos) return 0;
  std::istringstream hs(raw.substr(0, hdr_end));
  std::string line;
  std::getline(hs, line);
  if (line.size() < 12 || line.compare(0, 5, "HTTP/") != 0) return 0;
  r->status = std::atoi(line.c_str() + 9);
  while (std::getline(hs, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    while (!v.empty() && v.front() == ' ') v.erase(v.begin());
    r->headers[lower(line.substr(0, colon))] = v;
  }
  size_t len = static_cast<size_t>(std::atoll(r->header("content-length").c_str()));
  if (raw.size() < hdr_end + 4 + len) return 0;
  r->body = raw.substr(hdr_end + 4, len);
  return hdr_end + 4 + len;
}

std::string request_with_words(int words) {
  std::string state;
  for (int i = 0; i < words; ++i) state += (i % 7 ? "billing " : "card ");
  nlohmann::ordered_json req = nlohmann::ordered_json::parse(kSmallRequest);
  req["state"] = state;
  return req.dump();
}

HttpResponse http(int port, const std::string& method, const std::string& path,
                  const std::string& body,
                  const std::vector<std::pair<std::string, std::string>>& headers,
                  double timeout_s) {
  HttpResponse r;
  int fd = connect_loopback(port);
  if (fd < 0) return r;
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH")
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n";
  req += body;
  std::string raw;
  if (send_all(fd, req)) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    char buf[65536];
    while (!parse_response(raw, &r)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) break;
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) break;
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      raw.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  if (!parse_response(raw, &r)) r = HttpResponse{};
  return r;
}

KeepAliveClient::KeepAliveClient(int port, bool nodelay) : fd_(connect_loopback(port)) {
  int one = 1;
  if (fd_ >= 0 && nodelay) setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

KeepAliveClient::~KeepAliveClient() {
  if (fd_ >= 0) close(fd_);
}

HttpResponse KeepAliveClient::get(const std::string& path, double timeout_s) {
  return exchange("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", timeout_s);
}

HttpResponse KeepAliveClient::post(const std::string& path, const std::string& body,
                                   double timeout_s) {
  return exchange("POST " + path +
                      " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body,
                  timeout_s);
}

HttpResponse KeepAliveClient::exchange(const std::string& request, double timeout_s) {
  HttpResponse r;
  if (fd_ < 0) return r;
  if (!send_all(fd_, request)) return r;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[65536];
  while (!parse_response(pending_, &r)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    pollfd p{fd_, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) return HttpResponse{};
    ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return HttpResponse{};
    pending_.append(buf, static_cast<size_t>(n));
  }
  pending_.erase(0, parse_response(pending_, &r));
  return r;
}

HttpResponse post_json(int port, const std::string& body,
                       const std::vector<std::pair<std::string, std::string>>& headers) {
  auto h = headers;
  h.emplace_back("Content-Type", "application/json");
  return http(port, "POST", "/v1/systemone", body, h);
}

}  // namespace clef::server_test

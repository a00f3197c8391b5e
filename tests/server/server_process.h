// Test helpers: run `clefserve serve` as a child process on a free loopback port, talk raw HTTP to
// it, and run `clefserve decide` for the expected answers.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clef::server_test {

std::string golden_model(const std::string& name);  // tests/golden/models/<name>
// The requests of tests/golden/models/<name>.expected.jsonl, as JSON text, in file order.
std::vector<std::string> golden_requests(const std::string& name);

class ServerProcess {
 public:
  // Starts `CLEF_BINARY serve --port 0 <args>` (no `--port 0` when args has a --port) and waits
  // for its "listening" log line, or for it to exit.
  explicit ServerProcess(const std::vector<std::string>& args,
                         const std::map<std::string, std::string>& env = {});
  ~ServerProcess();  // SIGKILL if still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool started() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const;  // everything it wrote to stdout/stderr so far
  void signal(int sig) const;
  // Exit status (0..255), 128+signal when killed, or -1 when still running at the timeout.
  int wait_exit(double timeout_s);

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  bool exited_ = false;
  int exit_status_ = -1;  // valid once exited_
  std::string log_path_;
};

// Runs a program to completion; returns its exit status and sets *out to its stdout.
int run_program(const std::vector<std::string>& argv, const std::string& stdin_text,
                std::string* out);

struct HttpResponse {
  int status = 0;                              // 0: no response (connection failed or closed early)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
  nlohmann::ordered_json json() const {
    return nlohmann::ordered_json::parse(body, nullptr, false);
  }
};

// One request on a fresh connection ("Connection: close"), raw sockets so that every header (or its
// absence) is under the test's control.
HttpResponse http(int port, const std::string& method, const std::string& path,
                  const std::string& body = "",
                  const std::vector<std::pair<std::string, std::string>>& headers = {},
                  double timeout_s = 60);
HttpResponse post_json(int port, const std::string& body,
                       const std::vector<std::pair<std::string, std::string>>& headers = {});

// Several requests over ONE keep-alive connection: the server finishes each request (including its
// bookkeeping) before it reads the next one from the same connection.
class KeepAliveClient {
 public:
  // nodelay: TCP_NODELAY on the client's socket (each request is one send() anyway).
  explicit KeepAliveClient(int port, bool nodelay = false);
  ~KeepAliveClient();
  HttpResponse get(const std::string& path, double timeout_s = 30);
  // A JSON POST, request line + headers + body in ONE send() (as Python's http.client does), so
  // only the server's way of writing decides whether a round trip stalls.
  HttpResponse post(const std::string& path, const std::string& body, double timeout_s = 30);

 private:
  HttpResponse exchange(const std::string& request, double timeout_s);
  int fd_ = -1;
  std::string pending_;
};

// A connected TCP socket to 127.0.0.1:port, or -1.
int connect_loopback(int port);

// One HTTP/1.1 response (Content-Length framed) at the start of `raw`: the bytes it used, 0 while
// incomplete.
size_t parse_response(const std::string& raw, HttpResponse* r);

// A small valid one-question request (any model name is served by the test servers).
inline constexpr const char* kSmallRequest =
    R"({"model":"m","state":"A card was charged twice.","questions":{)"
    R"("topic":{"type":"choice","criteria":{"billing":"Billing","outage":"Outages"}}}})";
// kSmallRequest with a state of `words` words (one tiny-r2 token each, ~140 more for the schema).
std::string request_with_words(int words);

}  // namespace clef::server_test

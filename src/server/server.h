// The HTTP front-end (docs/spec/protocol.md): POST /v1/systemone, GET /health (readiness),
// /health/live (liveness), /v1/models, /metrics, /openapi.json, the playground (/) over an
// event-driven Boost.Beast (Asio) HTTP/1.1 server. One event-loop thread owns every connection
// (reads, deadlines, limits, writes), so an idle or slow client costs only memory; a small worker
// pool parses, validates and encodes bodies and hands encoded requests to the InferenceQueue, whose
// worker per engine (per GPU) runs them; answers are formatted by service::Decider::finish, the
// same code `clefserve decide` uses.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "server/inference_queue.h"
#include "server/log.h"
#include "service/decider.h"

namespace clef::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port (bind() returns it)
  size_t max_queue = 64;
  size_t max_batch_tokens = kDefaultMaxBatchTokens;  // see QueueOptions
  size_t max_body_bytes = 32u << 20;    // counted as it arrives, chunked included -> 413
  size_t max_header_bytes = 16u << 10;  // request line + header fields -> 431
  double header_timeout_s = 10;         // first byte of a request -> its header complete, else 408
  double body_timeout_s = 30;           // header complete -> body complete (else 408); also writes
  double idle_timeout_s = 60;           // keep-alive: an idle connection is closed after this
  size_t max_connections = 1024;        // open connections; beyond -> 503 + Connection: close
  int worker_threads = 0;               // parse/validate/encode/answer pool (0 = 2..8 by cores)
  std::vector<std::string> cors_origins;  // allowed Origin values ("*" = any); empty = CORS off
  std::string api_key;  // non-empty: Bearer KEY on all but /health and the playground
  bool ui = true;       // the playground page at / (and /ui/*); false (--no-ui): 404
  // Reported in /health; listed by /v1/models when the decider has no served_model_names.
  std::string model_name;
  bool demo = false;    // the built-in random-weights demo model (reported in /health)
  std::string version;  // clefserve version for /health and /openapi.json
  // Start-up, reported in /health: seconds to load the weights, what prepare() did on each engine
  // (in the engines' order), the warm-up.
  double load_s = 0, warm_up_s = 0;
  std::vector<engine::PrepareReport> prepared;
  // An open listening socket (Listener::release()) that bind() adopts instead of opening one.
  int listener_fd = -1;
  bool listener_v6 = false;
};

// A listening socket opened before the model loads, so that a port in use fails start-up at once.
// Connections made before the Server runs wait in the kernel's backlog: nothing is accepted (no
// /health answer either) until the Server's run() starts, after the warm-up.
class Listener {
 public:
  // port 0 = any free port. Throws std::runtime_error ("cannot listen on HOST:PORT: ...").
  Listener(const std::string& host, int port);
  ~Listener();  // closes the socket unless released
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  int port() const { return port_; }
  bool v6() const { return v6_; }
  // Hands the socket over (ServerOptions::listener_fd); the Listener no longer closes it.
  int release();

 private:
  int fd_ = -1;
  int port_ = 0;
  bool v6_ = false;
};

class Server {
 public:
  // `engines`: one or more, all prepared and warmed up; the queue feeds them all.
  Server(std::shared_ptr<service::Decider> decider, std::vector<QueueEngine> engines,
         ServerOptions opts, Log& log);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Opens the listening socket (or adopts ServerOptions::listener_fd); returns the bound port.
  // Throws std::runtime_error on failure.
  int bind();
  // Serves until begin_shutdown(); returns once every connection thread has finished.
  void run();
  // The first step of a drain: /health answers 503 {"status":"draining"} (/health/live still 200)
  // while connections are still accepted and every request is still answered, so that a load
  // balancer's health check takes this replica out of rotation before begin_shutdown() closes the
  // listening socket (`serve --drain-delay`). Thread-safe.
  void stop_ready();
  // Stops accepting (closes the listening socket); in-flight requests still complete. Implies
  // stop_ready(). Thread-safe.
  void begin_shutdown();
  // Waits until no request is being handled and the queue is empty; false at the deadline.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  size_t in_flight() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace clef::server

// The HTTP front-end (spec/protocol.md): POST /v1/systemone, GET /health, /v1/models, /metrics,
// /openapi.json over cpp-httplib. HTTP threads read and validate bodies, then hand encoded requests
// to the InferenceQueue's single engine worker; answers are formatted by service::Decider::finish,
// the same code `clefserve decide` uses.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/log.h"
#include "service/decider.h"

namespace clef::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port (bind() returns it)
  size_t max_queue = 64;
  size_t max_batch_tokens = 16384;
  size_t max_body_bytes = 8u << 20;
  int read_timeout_s = 10;  // a body must arrive within this (per read) or the connection drops
  int http_threads = 128;   // connection threads: stalled clients each hold one, so keep it large
  std::string api_key;      // non-empty: Authorization: Bearer KEY on everything but /health
  std::string model_name;   // reported in /health; listed by /v1/models when no served names
  std::vector<std::string> served_model_names;  // non-empty: only these `model` values accepted
  bool demo = false;    // the built-in random-weights demo model (reported in /health)
  std::string version;  // clefserve version for /health and /openapi.json
  // GPU memory in use, bytes; null or < 0 on the CPU backend.
  std::function<int64_t()> gpu_memory_used;
  // Start-up, reported in /health: seconds to load the weights, what prepare() did, the warm-up.
  double load_s = 0, warm_up_s = 0;
  engine::PrepareReport prepared;
};

class Server {
 public:
  Server(std::shared_ptr<service::Decider> decider, ServerOptions opts, Log& log);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Opens the listening socket; returns the bound port. Throws std::runtime_error on failure.
  int bind();
  // Serves until begin_shutdown(); returns once every connection thread has finished.
  void run();
  // Stops accepting (closes the listening socket); in-flight requests still complete. Thread-safe.
  void begin_shutdown();
  // Waits until no request is being handled and the queue is empty; false at the deadline.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  size_t in_flight() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace clef::server

// The state every connection shares (options, the engine queue, the worker pool, metrics, the
// connection registry) and the accept loop.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "server/http_util.h"
#include "server/inference_queue.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/net.h"
#include "server/openapi.h"
#include "server/request_id.h"
#include "server/server.h"
#include "server/worker_pool.h"
#include "service/decider.h"

namespace clef::server::detail {

class Connection;

// Everything the connections share. One event-loop thread (Server::run) owns the acceptor, every
// connection and the registry; the worker pool and the engine worker only post back to it.
struct Core {
  Core(std::shared_ptr<service::Decider> d, std::vector<QueueEngine> engines, ServerOptions o,
       Log& l)
      : decider(std::move(d)),
        opts(std::move(o)),
        log(l),
        infos(engine_infos(engines)),
        metrics(device_names(engines)),
        ioc(1),
        acceptor(ioc),
        accept_retry(ioc),
        pool(opts.worker_threads > 0
                 ? opts.worker_threads
                 : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u))),
        queue(std::move(engines), QueueOptions{opts.max_queue, opts.max_batch_tokens}, metrics),
        started_unix(static_cast<int64_t>(std::time(nullptr))) {
    openapi = openapi_document(opts.version, !opts.api_key.empty(), opts.ui);
    cors_any = std::find(opts.cors_origins.begin(), opts.cors_origins.end(), "*") !=
               opts.cors_origins.end();
  }

  std::shared_ptr<service::Decider> decider;
  ServerOptions opts;
  Log& log;
  std::vector<engine::EngineInfo> infos;  // per engine, in queue order (read once)
  Metrics metrics;
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::steady_timer accept_retry;
  WorkerPool pool;
  InferenceQueue queue;
  RequestIdGenerator ids;
  std::string openapi;
  int64_t started_unix;
  bool cors_any = false;
  std::atomic<bool> shutting_down{false};
  std::atomic<bool> ready{true};  // false once a drain began (Server::stop_ready)
  bool draining = false;          // event-loop thread's view of shutting_down
  std::atomic<size_t> in_flight{0};
  std::mutex idle_mutex;
  std::condition_variable idle_cv;
  std::unordered_set<Connection*> connections;  // event-loop thread only
  bool refusing = false;                        // last accept was over --max-connections

  static std::vector<engine::EngineInfo> engine_infos(const std::vector<QueueEngine>& engines) {
    std::vector<engine::EngineInfo> out;
    for (const auto& e : engines) out.push_back(e.engine ? e.engine->info() : engine::EngineInfo{});
    return out;
  }
  static std::vector<std::string> device_names(const std::vector<QueueEngine>& engines) {
    std::vector<std::string> out;
    for (const auto& e : engines) out.push_back(e.device);
    return out;
  }
  std::string display_name() const {
    const auto& names = decider->options().served_model_names;
    return names.empty() ? opts.model_name : names.front();
  }
  bool origin_allowed(const std::string& origin) const {
    if (origin.empty()) return false;
    return cors_any || std::find(opts.cors_origins.begin(), opts.cors_origins.end(), origin) !=
                           opts.cors_origins.end();
  }
  bool authorized(std::string_view auth) const {
    const std::string_view prefix = "Bearer ";
    return auth.size() > prefix.size() && auth.substr(0, prefix.size()) == prefix &&
           constant_time_equal(auth.substr(prefix.size()), opts.api_key);
  }
  void request_started() { in_flight.fetch_add(1); }
  void request_done() {
    if (in_flight.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(idle_mutex);
      idle_cv.notify_all();
    }
  }

  void accept();
  void on_accept(beast::error_code ec, tcp::socket sock);
  void drain();  // event-loop thread: stop accepting, close idle connections
};

}  // namespace clef::server::detail

// `clefserve serve`: the HTTP service (docs/spec/protocol.md). Start-up order: check --device
// against the machine (exit 2) -> bind the port (a port in use fails at once, before any loading)
// -> load (progress on stderr) -> verify -> one engine per device of --device -> prepare (every
// token bucket's GEMM choices, graphs and head scratch, so no request pays one-time work; GEMM
// choices persist in the tuning cache) -> one warm-up forward on each engine -> accept
// ("listening"). The engines are created, prepared and warmed up in parallel, one thread per
// device; any device's failure fails start-up.
// Connections made before that wait in the kernel's backlog, so /health never answers before the
// warm-up. Any failure exits 1 with one clear `startup_failed` line. SIGTERM: /health 503 for
// --drain-delay while still serving; then (SIGINT: at once) stop accepting, drain in-flight
// requests (bounded by
// --shutdown-timeout), exit 0; connections still open at the timeout: `shutdown_forced`, exit 1.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/media_flags.h"
#include "encoding/encode.h"
#include "encoding/request.h"
#include "engine/device_spec.h"
#include "engine/engine.h"
#include "model/demo_model.h"
#include "model/release.h"
#include "server/log.h"
#include "server/server.h"
#include "server/signal_pipe.h"
#include "service/decider.h"
#include "service/warm_up.h"

namespace clef::cli {

namespace {

struct ServeArgs {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8000;
  engine::EngineOptions engine_options;
  engine::DeviceSpec devices;
  std::vector<int> device_indices;  // `devices` resolved against the machine
  int max_length = encoding::kDefaultMaxLength;
  encoding::Limits limits;
  std::string truncation = "error";
  size_t max_queue = 64;
  size_t max_batch_tokens = 0;  // 0 = --max-length
  std::string api_key;
  std::vector<std::string> served_model_names;
  std::string verify;
  std::string revision;
  double shutdown_timeout = 30.0;
  double drain_delay = 0.0;
  std::string log_format = "text";
  std::string tuning_cache;           // "" = the default folder; "off" = none
  size_t max_body_bytes = 32u << 20;  // room for base64 images and video frames
  size_t max_header_bytes = 16u << 10;
  double header_timeout = 10, body_timeout = 30, keep_alive_timeout = 60;
  size_t max_connections = 1024;
  std::vector<std::string> cors_origins;
  bool no_ui = false;
};

// --tuning-cache default: $CLEF_CACHE_DIR, else $XDG_CACHE_HOME/clefserve, else ~/.cache/clefserve.
std::string default_cache_dir() {
  if (const char* d = std::getenv("CLEF_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/clefserve";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/clefserve";
  return "";
}

using Clock = std::chrono::steady_clock;

// Runs f(i) for every device at once, one thread each (a single device: on this thread), and waits
// for all of them. Any failure fails the whole, with the first failing device named when there
// are several.
template <typename F>
void on_each_device(const std::vector<std::string>& labels, F f) {
  std::vector<std::exception_ptr> errors(labels.size());
  auto guarded = [&](size_t i) {
    try {
      f(i);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  if (labels.size() == 1) {
    guarded(0);
  } else {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < labels.size(); ++i) threads.emplace_back(guarded, i);
    for (auto& t : threads) t.join();
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!errors[i]) continue;
    if (labels.size() == 1) std::rethrow_exception(errors[i]);
    try {
      std::rethrow_exception(errors[i]);
    } catch (const std::exception& e) {
      throw std::runtime_error(labels[i] + ": " + e.what());
    }
  }
}

int run_serve(const ServeArgs& a) {
  server::Log log(a.log_format == "json" ? server::LogFormat::Json : server::LogFormat::Text);
  const std::string version = std::string(CLEF_VERSION) + " (" + CLEF_GIT_COMMIT + ")";

  // SIGTERM/SIGINT arrive through a pipe and are handled by an ordinary thread.
  server::SignalPipe signals({SIGTERM, SIGINT});

  std::atomic<server::Server*> running{nullptr};
  std::atomic<bool> run_returned{false};
  std::atomic<bool> exiting{false};
  std::atomic<bool> signaled{false};
  std::atomic<bool> drained_cleanly{true};
  std::thread signal_thread([&] {
    int sig = signals.wait();
    if (exiting || sig == 0) return;
    signaled = true;
    server::Server* srv = running.load();
    if (!srv) {
      log.error("startup_failed", {{"error", std::string("interrupted by ") + strsignal(sig)}});
      std::_Exit(1);
    }
    if (sig == SIGTERM && a.drain_delay > 0) {
      // Not ready first (/health 503) while still serving, so load balancers stop sending before
      // the listening socket closes; a second signal cuts the delay short.
      log.info("draining", {{"signal", strsignal(sig)},
                            {"delay_s", a.drain_delay},
                            {"note", "/health answers 503; requests are still accepted"}});
      srv->stop_ready();
      const int again = signals.wait_for(a.drain_delay);
      if (again > 0) log.info("drain_delay_cut", {{"signal", strsignal(again)}});
    }
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(a.shutdown_timeout));
    log.info("shutdown", {{"signal", strsignal(sig)},
                          {"in_flight", srv->in_flight()},
                          {"timeout_s", a.shutdown_timeout}});
    srv->begin_shutdown();
    bool idle = srv->wait_idle(deadline);
    if (!idle) {
      drained_cleanly = false;
      log.warn("shutdown_timeout", {{"abandoned_requests", srv->in_flight()}});
    }
    // Connections end after their current answer (idle keep-alive ones at once, half-sent requests
    // at their deadline); repeat the call in case the signal came before the event loop started.
    while (!run_returned && Clock::now() < deadline) {
      srv->begin_shutdown();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!run_returned) {
      log.warn("shutdown_forced", {{"reason", "connections still open at the shutdown timeout"}});
      std::_Exit(1);
    }
  });
  auto stop_signal_thread = [&] {
    exiting = true;
    signals.wake();
    signal_thread.join();
  };

  std::unique_ptr<server::Server> srv;
  int port = 0;
  try {
    // The port first: a port in use fails here, before seconds of loading and warm-up.
    server::Listener listener(a.host, a.port);
    log.info("bound", {{"port", listener.port()},
                       {"note", "accepting connections after the load and the warm-up"}});
    auto progress = [&log](const std::string& line) { log.info("load", {{"step", line}}); };
    std::string dir = a.model_dir;
    bool demo = dir.empty();
    if (demo) {
      dir = model::ensure_demo_model(CLEF_VERSION, progress);
      log.warn("demo_model", {{"dir", dir},
                              {"note",
                               "no --model given: serving the built-in DEMO model with "
                               "random weights; its answers are meaningless"}});
    }
    model::LoadOptions lo;
    lo.verify_file = a.verify;
    lo.revision = a.revision;
    lo.progress = progress;
    auto t0 = Clock::now();
    std::shared_ptr<const model::Release> release = model::Release::load(dir, lo);
    std::vector<std::string> labels;
    for (int index : a.device_indices)
      labels.push_back(engine::device_label(a.engine_options.device, index));
    std::vector<std::shared_ptr<engine::Engine>> engines(labels.size());
    on_each_device(labels, [&](size_t i) {
      engine::EngineOptions eo = a.engine_options;
      eo.device_index = a.device_indices[i];
      engines[i] = engine::create_engine(release, eo);
    });
    const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (size_t i = 0; i < engines.size(); ++i) {
      const engine::EngineInfo info = engines[i]->info();
      log.info("loaded", {{"model", release->dir},
                          {"revision", release->revision},
                          {"weights_sha256_verified", release->weights_sha256_verified},
                          {"engine", labels[i]},
                          {"backend", info.backend},
                          {"device", info.device},
                          {"dtype", info.dtype},
                          {"seconds", load_s}});
    }

    service::DeciderOptions dopts;
    dopts.limits = a.limits;
    dopts.encode.max_length = a.max_length;
    dopts.encode.truncation =
        a.truncation == "allow" ? encoding::Truncation::Allow : encoding::Truncation::Error;
    dopts.served_model_names = a.served_model_names;
    service::media_engines(dopts, engines);
    auto decider = std::make_shared<service::Decider>(release, dopts);

    std::vector<engine::PrepareReport> prepared(engines.size());
    on_each_device(labels, [&](size_t i) {
      engine::PrepareOptions po;
      po.max_tokens = a.max_length;
      po.max_questions = static_cast<int>(dopts.limits.max_questions);
      po.max_options = static_cast<int>(dopts.limits.max_options_per_request);
      po.tuning_cache = a.tuning_cache == "off"  ? ""
                        : a.tuning_cache.empty() ? default_cache_dir()
                                                 : a.tuning_cache;
      const std::string& label = labels[i];
      po.progress = [&log, &label](const std::string& line) {
        log.info("prepare", {{"engine", label}, {"step", line}});
      };
      prepared[i] = engines[i]->prepare(po);
    });
    for (size_t i = 0; i < engines.size(); ++i) {
      const engine::PrepareReport& p = prepared[i];
      if (p.buckets > 0)
        log.info("prepared", {{"engine", labels[i]},
                              {"seconds", p.total_s},
                              {"gemm_tuning_s", p.tuning_s},
                              {"graphs_s", p.graphs_s},
                              {"graphs", p.graphs},
                              {"head_s", p.head_s},
                              {"buckets", p.buckets},
                              {"max_bucket_tokens", p.max_bucket},
                              {"gemm_shapes", p.gemm_shapes},
                              {"gemm_shapes_from_cache", p.gemm_shapes_cached},
                              {"tuning_cache", p.cache_status}});
    }

    auto t1 = Clock::now();
    on_each_device(labels, [&](size_t i) { service::warm_up(*decider, *engines[i]); });
    const double warm_up_s = std::chrono::duration<double>(Clock::now() - t1).count();
    log.info("warm_up", {{"seconds", warm_up_s}, {"engines", engines.size()}});

    server::ServerOptions so;
    so.host = a.host;
    so.port = a.port;
    so.max_queue = a.max_queue;
    so.max_batch_tokens =
        a.max_batch_tokens ? a.max_batch_tokens : static_cast<size_t>(a.max_length);
    so.api_key = a.api_key;
    so.max_body_bytes = a.max_body_bytes;
    so.max_header_bytes = a.max_header_bytes;
    so.header_timeout_s = a.header_timeout;
    so.body_timeout_s = a.body_timeout;
    so.idle_timeout_s = a.keep_alive_timeout;
    so.max_connections = a.max_connections;
    so.cors_origins = a.cors_origins;
    so.ui = !a.no_ui;
    so.model_name = demo ? model::kDemoModelName : release->name;
    so.demo = demo;
    so.version = version;
    so.load_s = load_s;
    so.warm_up_s = warm_up_s;
    so.prepared = prepared;
    so.listener_v6 = listener.v6();
    so.listener_fd = listener.release();
    std::vector<server::QueueEngine> queue_engines;
    for (size_t i = 0; i < engines.size(); ++i)
      queue_engines.push_back(server::QueueEngine{labels[i], engines[i]});
    srv = std::make_unique<server::Server>(decider, std::move(queue_engines), so, log);
    port = srv->bind();
  } catch (const std::exception& e) {
    log.error("startup_failed", {{"error", e.what()}});
    stop_signal_thread();
    return 1;
  }

  log.info("listening", {{"url", "http://" + a.host + ":" + std::to_string(port)},
                         {"port", port},
                         {"max_queue", a.max_queue},
                         {"api_key", a.api_key.empty() ? "off" : "on"}});
  running = srv.get();
  srv->run();
  run_returned = true;
  if (signaled) {
    signal_thread.join();  // it finishes its drain bookkeeping
  } else {
    stop_signal_thread();  // the accept loop failed on its own
    log.error("listen_failed", {{"error", "the listening socket failed"}});
    srv.reset();
    return 1;
  }
  srv.reset();  // joins the engine workers after the queue is empty
  log.info("stopped", {{"drained", drained_cleanly.load()}});
  return 0;
}

}  // namespace

void add_serve(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd =
      app.add_subcommand("serve", "Serve the System One API over HTTP (docs/spec/protocol.md)");
  cmd->add_option("--model", args->model_dir,
                  "Clef release folder (default: the built-in demo model, random weights)");
  cmd->add_option("--host", args->host, "Address to bind")->capture_default_str();
  cmd->add_option("--port", args->port, "Port (0 = any free port, printed at start-up)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  add_engine_options(cmd, args->engine_options, &args->devices);
  cmd->add_option("--max-length", args->max_length, "Context length in tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--truncation", args->truncation,
                  "Default when a request does not say: error | allow")
      ->capture_default_str()
      ->check(CLI::IsMember({"error", "allow"}));
  add_media_limit_options(cmd, args->limits);
  cmd->add_option("--max-queue", args->max_queue, "Requests waiting for the engine; beyond -> 429")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-batch-tokens", args->max_batch_tokens,
                  "Tokens per forward pass across batched requests (default: --max-length)")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--api-key", args->api_key,
                  "Require Authorization: Bearer KEY on every endpoint but /health")
      ->envname("CLEF_API_KEY");
  cmd->add_option("--served-model-name", args->served_model_names,
                  "Accepted model name (repeatable; default: accept any, list the folder name)");
  cmd->add_option("--verify", args->verify, "sha256sum-format file to check the release against");
  cmd->add_option("--revision", args->revision, "Model revision to report in /health");
  cmd->add_option(
         "--shutdown-timeout", args->shutdown_timeout,
         "Seconds to finish in-flight requests after SIGTERM/SIGINT (connections still open "
         "then: exit 1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--drain-delay", args->drain_delay,
                  "Seconds between SIGTERM and closing the listening socket, during which /health "
                  "answers 503 (draining) and requests are still served, so load balancers stop "
                  "sending first (SIGINT, or a second signal, skips it)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--tuning-cache", args->tuning_cache,
                  "Folder for measured GEMM choices (cuda), reused when device, driver and "
                  "libraries match; 'off' = none (default: $CLEF_CACHE_DIR, "
                  "$XDG_CACHE_HOME/clefserve or ~/.cache/clefserve)");
  cmd->add_option("--max-body-bytes", args->max_body_bytes,
                  "Largest request body, counted as it arrives (chunked too); beyond -> 413")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 32));
  cmd->add_option("--max-header-bytes", args->max_header_bytes,
                  "Largest request line + header fields; beyond -> 431")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1024}, size_t{1} << 20));
  cmd->add_option("--header-timeout", args->header_timeout,
                  "Seconds from a request's first byte to its complete header; else 408 and close")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
  cmd->add_option("--body-timeout", args->body_timeout,
                  "Seconds from the header to the complete body (else 408), and to write an answer")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
  cmd->add_option("--keep-alive-timeout", args->keep_alive_timeout,
                  "Seconds an idle keep-alive connection stays open")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 86400.0));
  cmd->add_option("--max-connections", args->max_connections,
                  "Open connections; beyond -> 503 with Connection: close")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  cmd->add_option(
      "--cors-origin", args->cors_origins,
      "Allowed browser Origin (repeatable; '*' = any): answers CORS preflights and adds "
      "Access-Control-Allow-Origin (default: CORS off)");
  cmd->add_flag("--no-ui", args->no_ui,
                "Do not serve the playground page at / (and its files under /ui/): 404");
  cmd->add_option("--log-format", args->log_format, "text | json")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  cmd->callback([args, &exit_code] {
    // An index the machine does not have is a usage error, before anything loads. Without any
    // usable device nothing is checked here: engine creation fails closed with its own message.
    try {
      const engine::DeviceSpec& d = args->devices;
      args->device_indices = engine::resolve_devices(
          d, d.device == engine::Device::Cuda ? engine::cuda_device_count() : 0);
    } catch (const std::invalid_argument& e) {
      throw CLI::ValidationError(e.what());
    }
    exit_code = run_serve(*args);
  });
}

}  // namespace clef::cli

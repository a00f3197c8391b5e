#include "server/server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <exception>
#include <mutex>
#include <stdexcept>

#include "encoding/encode.h"
#include "encoding/request.h"
#include "json/value.h"
#include "server/inference_queue.h"
#include "server/metrics.h"
#include "server/openapi.h"
#include "server/request_id.h"

namespace clef::server {

namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

enum class Route { SystemOne, Health, Models, Metrics, OpenApi, Unknown };

Route route_of(const std::string& path) {
  if (path == "/v1/systemone") return Route::SystemOne;
  if (path == "/health") return Route::Health;
  if (path == "/v1/models") return Route::Models;
  if (path == "/metrics") return Route::Metrics;
  if (path == "/openapi.json") return Route::OpenApi;
  return Route::Unknown;
}

const char* route_label(Route r) {
  switch (r) {
    case Route::SystemOne:
      return "/v1/systemone";
    case Route::Health:
      return "/health";
    case Route::Models:
      return "/v1/models";
    case Route::Metrics:
      return "/metrics";
    case Route::OpenApi:
      return "/openapi.json";
    case Route::Unknown:
      break;
  }
  return "other";
}

// What the access log and metrics need about the request this thread is serving. httplib runs a
// request start to finish (pre-routing handler .. logger) on one connection thread and gives the
// logger no per-request slot of ours, so the context is per thread; it is reset per request.
struct RequestContext {
  bool active = false;
  Clock::time_point start;
  // Server-Timing phases of a /v1/systemone request (ms; < 0 = not reached).
  double read_ms = -1, encode_ms = -1, queue_ms = -1, forward_ms = -1, answer_ms = -1;
  std::string id;
  Route route = Route::Unknown;
  int64_t input_tokens = -1;
  int64_t truncated_state_tokens = 0;
};
thread_local RequestContext t_ctx;

// Seconds since this thread's request started (0 for a request httplib answered before our
// pre-routing handler ran), and its route.
double request_seconds() {
  return t_ctx.active ? std::chrono::duration<double>(Clock::now() - t_ctx.start).count() : 0.0;
}
Route request_route(const httplib::Request& req) {
  return t_ctx.active ? t_ctx.route : route_of(req.path);
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// W3C Server-Timing: "name;dur=ms" entries, comma-separated; phases not reached are left out.
std::string server_timing(const RequestContext& c, double total_ms) {
  std::string out;
  char buf[64];
  auto add = [&](const char* name, double ms) {
    if (ms < 0) return;
    std::snprintf(buf, sizeof buf, "%s%s;dur=%.3f", out.empty() ? "" : ", ", name, ms);
    out += buf;
  };
  add("read", c.read_ms);
  add("encode", c.encode_ms);
  add("queue", c.queue_ms);
  add("forward", c.forward_ms);
  add("answer", c.answer_ms);
  add("total", total_ms);
  return out;
}

std::string dump(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

void send_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void send_detail(httplib::Response& res, int status, const std::string& detail) {
  send_json(res, status, dump(ojson{{"detail", detail}}));
}

void send_validation_error(httplib::Response& res, const encoding::FieldError& e) {
  ojson loc = ojson::array();
  for (const auto& part : e.loc) loc.push_back(part);
  ojson item{{"loc", loc}, {"msg", e.msg}, {"type", e.type}};
  send_json(res, 422, dump(ojson{{"detail", ojson::array({item})}}));
}

const char* default_detail(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Not authenticated";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Request body too large";
    case 414:
      return "Request URI too long";
    case 415:
      return "Unsupported Media Type";
    case 416:
      return "Range Not Satisfiable";
    case 429:
      return "Too Many Requests";
    case 503:
      return "Service Unavailable";
    default:
      return status >= 500 ? "Internal Server Error" : "Error";
  }
}

// `application/json` or `application/<x>+json`, any parameters (FastAPI's rule).
bool is_json_content_type(const std::string& value) {
  std::string media = value.substr(0, value.find(';'));
  while (!media.empty() && std::isspace(static_cast<unsigned char>(media.back()))) media.pop_back();
  size_t b = 0;
  while (b < media.size() && std::isspace(static_cast<unsigned char>(media[b]))) ++b;
  media = media.substr(b);
  for (auto& c : media) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (media == "application/json") return true;
  const std::string prefix = "application/", suffix = "+json";
  return media.size() > prefix.size() + suffix.size() && media.starts_with(prefix) &&
         media.ends_with(suffix);
}

// Compares without an early exit so the key cannot be guessed byte by byte from timings.
bool constant_time_equal(std::string_view a, std::string_view b) {
  size_t n = std::max(a.size(), b.size());
  size_t diff = a.size() ^ b.size();
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<size_t>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

struct Server::Impl {
  Impl(std::shared_ptr<service::Decider> d, ServerOptions o, Log& l)
      : decider(std::move(d)),
        opts(std::move(o)),
        log(l),
        info(decider->engine().info()),
        queue(decider->engine(), QueueOptions{opts.max_queue, opts.max_batch_tokens}, metrics),
        started_unix(static_cast<int64_t>(std::time(nullptr))) {
    openapi = openapi_document(opts.version, !opts.api_key.empty());
    setup();
  }

  std::shared_ptr<service::Decider> decider;
  ServerOptions opts;
  Log& log;
  engine::EngineInfo info;
  Metrics metrics;
  InferenceQueue queue;
  RequestIdGenerator ids;
  httplib::Server http;
  std::string openapi;
  int64_t started_unix;
  std::atomic<bool> shutting_down{false};
  std::atomic<size_t> in_flight{0};
  std::mutex idle_mutex;
  std::condition_variable idle_cv;

  std::string display_name() const {
    return opts.served_model_names.empty() ? opts.model_name : opts.served_model_names.front();
  }

  void setup();
  void dispatch(const httplib::Request& req, httplib::Response& res);
  void handle_systemone(const httplib::Request& req, httplib::Response& res);
  void handle_health(httplib::Response& res);
  void handle_models(httplib::Response& res);
  void handle_metrics(httplib::Response& res);
  void request_done();
};

void Server::Impl::setup() {
  http.new_task_queue = [n = opts.http_threads] {
    return new httplib::ThreadPool(static_cast<size_t>(n));
  };
  // httplib's default also sets SO_REUSEPORT, which would let a second server share the port
  // silently; only SO_REUSEADDR (restart while old connections linger in TIME_WAIT).
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof yes);
  });
  // Nagle off: a response leaves as header and body writes, and with Nagle the body would wait for
  // the client's delayed ACK of the header segment (~40 ms on Linux) on every keep-alive request.
  // Set on the listening socket; Linux's accepted sockets inherit it (tests/server stall test).
  http.set_tcp_nodelay(true);
  http.set_payload_max_length(opts.max_body_bytes);
  http.set_read_timeout(opts.read_timeout_s, 0);
  http.set_write_timeout(opts.read_timeout_s, 0);
  // Keep-alive connections each hold a thread while idle: short idle timeout, many requests each.
  http.set_keep_alive_timeout(2);
  http.set_keep_alive_max_count(1000);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (t_ctx.active) request_done();  // a previous request on this thread never reached the logger
    t_ctx = RequestContext{};
    t_ctx.active = true;
    t_ctx.start = Clock::now();
    t_ctx.route = route_of(req.path);
    std::string client_id = req.get_header_value("X-Request-Id");
    t_ctx.id = is_acceptable_request_id(client_id) ? client_id : ids.next();
    res.set_header("X-Request-Id", t_ctx.id);
    in_flight.fetch_add(1);
    return httplib::Server::HandlerResponse::Unhandled;
  });

  auto handler = [this](const httplib::Request& req, httplib::Response& res) {
    dispatch(req, res);
  };
  http.Get(".*", handler);
  http.Post(".*", handler);
  http.Put(".*", handler);
  http.Patch(".*", handler);
  http.Delete(".*", handler);
  http.Options(".*", handler);

  // Errors httplib produces itself (413 body too large, 400 unreadable request, ...) get the same
  // {"detail": ...} JSON body as ours. Bodies our handlers wrote are left alone.
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request&, httplib::Response& res) {
        if (!res.has_header("X-Request-Id"))
          res.set_header("X-Request-Id", t_ctx.active ? t_ctx.id : ids.next());
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        res.set_content(dump(ojson{{"detail", default_detail(res.status)}}), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));

  // Last resort: never leak an exception text (httplib would put it in a header); log it instead.
  http.set_exception_handler(
      [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        log.error("internal_error", {{"id", t_ctx.id}, {"path", req.path}, {"error", what}});
        send_detail(res, 500, "Internal Server Error");
      });

  // Counted before the response is written (httplib calls this handler just before sending, the
  // logger only after): a client that has its answer and then scrapes /metrics sees it counted.
  // Also the last moment before the response is written: Server-Timing's total ends here.
  http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const double secs = request_seconds();
    if (t_ctx.active && t_ctx.route == Route::SystemOne)
      res.set_header("Server-Timing", server_timing(t_ctx, secs * 1e3));
    metrics.observe_request(route_label(request_route(req)), res.status, secs);
  });

  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const double secs = request_seconds();
    const Route route = request_route(req);
    ojson fields{{"id", t_ctx.active ? t_ctx.id : res.get_header_value("X-Request-Id")},
                 {"method", req.method},
                 {"path", route_label(route)},
                 {"status", res.status},
                 {"latency_ms", std::round(secs * 1e6) / 1e3},
                 {"remote", req.remote_addr}};
    if (t_ctx.active && t_ctx.input_tokens >= 0) fields["input_tokens"] = t_ctx.input_tokens;
    if (t_ctx.active && t_ctx.truncated_state_tokens > 0)
      fields["truncated_state_tokens"] = t_ctx.truncated_state_tokens;
    log.info("access", fields);
    if (t_ctx.active) request_done();
  });
}

void Server::Impl::request_done() {
  t_ctx.active = false;
  if (in_flight.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lock(idle_mutex);
    idle_cv.notify_all();
  }
}

void Server::Impl::dispatch(const httplib::Request& req, httplib::Response& res) {
  Route route = route_of(req.path);
  if (route == Route::Unknown) return send_detail(res, 404, "Not Found");
  bool post = route == Route::SystemOne;
  bool allowed = post ? req.method == "POST" : (req.method == "GET" || req.method == "HEAD");
  if (!allowed) {
    res.set_header("Allow", post ? "POST" : "GET, HEAD");
    return send_detail(res, 405, "Method Not Allowed");
  }
  if (route != Route::Health && !opts.api_key.empty()) {
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    bool ok = auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
              constant_time_equal(auth.substr(prefix.size()), opts.api_key);
    if (!ok) {
      res.set_header("WWW-Authenticate", "Bearer");
      return send_detail(res, 401, "Not authenticated");
    }
  }
  switch (route) {
    case Route::SystemOne:
      return handle_systemone(req, res);
    case Route::Health:
      return handle_health(res);
    case Route::Models:
      return handle_models(res);
    case Route::Metrics:
      return handle_metrics(res);
    case Route::OpenApi:
      return send_json(res, 200, openapi);
    case Route::Unknown:
      break;
  }
}

void Server::Impl::handle_systemone(const httplib::Request& req, httplib::Response& res) {
  // No shutting-down check here: a request that reached this point is in flight and is finished
  // during the drain; new connections are no longer accepted once shutdown began.
  const auto handler_start = Clock::now();
  if (t_ctx.active) t_ctx.read_ms = ms_between(t_ctx.start, handler_start);
  if (!req.has_header("Content-Type") ||
      !is_json_content_type(req.get_header_value("Content-Type")))
    return send_detail(res, 415, "Content-Type must be application/json");

  json::ParseError perr;
  auto body = json::parse(req.body, &perr);
  if (!body) return send_detail(res, 400, "Malformed JSON: " + perr.message);

  const auto& dopts = decider->options();
  service::Prepared prepared;
  try {
    prepared.request = encoding::validate_request(*body, dopts.limits);
  } catch (const encoding::RequestError& e) {
    if (e.status == 422) return send_validation_error(res, e.error);
    return send_detail(res, e.status, e.error.msg);
  }
  const auto& names = opts.served_model_names;
  if (!names.empty() &&
      std::find(names.begin(), names.end(), prepared.request.model) == names.end()) {
    return send_detail(res, 404, "The model '" + prepared.request.model + "' is not served here");
  }
  try {
    prepared.encoded =
        encoding::encode_request(prepared.request, *decider->release().tokenizer, dopts.encode);
  } catch (const encoding::RequestError& e) {
    if (e.status == 422) return send_validation_error(res, e.error);
    return send_detail(res, e.status, e.error.msg);
  }

  t_ctx.encode_ms = ms_between(handler_start, Clock::now());
  auto fut = queue.submit(prepared.encoded);
  if (!fut) {
    res.set_header("Retry-After", "1");
    return send_detail(res, 429, "The request queue is full; retry later");
  }
  json::Value answer;
  try {
    QueueResult out = fut->get();
    const auto answer_start = Clock::now();
    t_ctx.queue_ms = out.queue_s * 1e3;
    t_ctx.forward_ms = out.forward_s * 1e3;
    answer = decider->finish(prepared, out.output);
    t_ctx.answer_ms = ms_between(answer_start, Clock::now());
  } catch (const std::exception& e) {
    // Engine failures and non-finite probabilities: logged with the id, never sent to the client.
    log.error("internal_error", {{"id", t_ctx.id}, {"error", e.what()}});
    return send_detail(res, 500, "Internal Server Error (request id " + t_ctx.id + ")");
  }
  const auto& enc = prepared.encoded;
  t_ctx.input_tokens = static_cast<int64_t>(enc.input_ids.size());
  t_ctx.truncated_state_tokens = enc.truncated_state_tokens;
  metrics.add_tokens(enc.input_ids.size(), static_cast<size_t>(enc.truncated_state_tokens));
  if (enc.truncated_state_tokens > 0)
    res.set_header("X-Clef-State-Truncated", std::to_string(enc.truncated_state_tokens));
  send_json(res, 200, json::dumps(answer));
}

void Server::Impl::handle_health(httplib::Response& res) {
  if (shutting_down) return send_detail(res, 503, "The server is shutting down");
  const auto& rel = decider->release();
  ojson kernels = ojson::object();
  for (const auto& [k, v] : info.kernels) kernels[k] = v;
  ojson h{{"status", "ok"},
          {"model", display_name()},
          {"backend", info.backend},
          {"device", info.device},
          {"dtype", info.dtype},
          {"kernels", kernels},
          {"model_revision", rel.revision},
          {"weights_sha256_verified", rel.weights_sha256_verified},
          {"max_length", decider->options().encode.max_length},
          {"version", opts.version},
          {"demo", opts.demo}};
  if (!info.versions.empty()) {
    ojson gpu{{"name", info.device}};
    for (const auto& [k, v] : info.versions) gpu[k] = v;
    h["gpu"] = gpu;
  }
  const auto& p = opts.prepared;
  ojson startup{{"load_s", opts.load_s}, {"warm_up_s", opts.warm_up_s}};
  if (p.buckets > 0) {
    startup["prepare_s"] = p.total_s;
    startup["gemm_tuning_s"] = p.tuning_s;
    startup["graphs_s"] = p.graphs_s;
    startup["head_s"] = p.head_s;
    startup["buckets"] = p.buckets;
    startup["max_bucket_tokens"] = p.max_bucket;
    startup["gemm_shapes"] = p.gemm_shapes;
    startup["gemm_shapes_from_cache"] = p.gemm_shapes_cached;
    startup["tuning_cache"] = p.cache_status;
    if (!p.cache_path.empty()) startup["tuning_cache_path"] = p.cache_path;
  }
  h["startup"] = startup;
  send_json(res, 200, dump(h));
}

void Server::Impl::handle_models(httplib::Response& res) {
  ojson data = ojson::array();
  auto add = [&](const std::string& name) {
    data.push_back(ojson{
        {"id", name}, {"object", "model"}, {"created", started_unix}, {"owned_by", "clefserve"}});
  };
  if (opts.served_model_names.empty()) add(opts.model_name);
  for (const auto& n : opts.served_model_names) add(n);
  send_json(res, 200, dump(ojson{{"object", "list"}, {"data", data}}));
}

void Server::Impl::handle_metrics(httplib::Response& res) {
  Gauges g;
  g.queue_depth = queue.depth();
  g.queue_capacity = queue.capacity();
  g.in_flight = in_flight.load();
  g.gpu_memory_used_bytes = opts.gpu_memory_used ? opts.gpu_memory_used() : -1;
  res.status = 200;
  res.set_content(metrics.render(g), "text/plain; version=0.0.4; charset=utf-8");
}

Server::Server(std::shared_ptr<service::Decider> decider, ServerOptions opts, Log& log)
    : impl_(std::make_unique<Impl>(std::move(decider), std::move(opts), log)) {}

Server::~Server() {
  begin_shutdown();
  impl_->queue.stop();
}

int Server::bind() {
  int port =
      impl_->opts.port == 0
          ? impl_->http.bind_to_any_port(impl_->opts.host)
          : (impl_->http.bind_to_port(impl_->opts.host, impl_->opts.port) ? impl_->opts.port : -1);
  if (port < 0) {
    throw std::runtime_error("cannot listen on " + impl_->opts.host + ":" +
                             std::to_string(impl_->opts.port) +
                             " (address in use, or not an address of this machine)");
  }
  return port;
}

void Server::run() {
  impl_->http.listen_after_bind();
}

void Server::begin_shutdown() {
  impl_->shutting_down = true;
  impl_->http.stop();
}

bool Server::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(impl_->idle_mutex);
  return impl_->idle_cv.wait_until(
      lock, deadline, [this] { return impl_->in_flight.load() == 0 && impl_->queue.depth() == 0; });
}

size_t Server::in_flight() const {
  return impl_->in_flight.load();
}

}  // namespace clef::server

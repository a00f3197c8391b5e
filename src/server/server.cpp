#include "server/server.h"

#include <sys/resource.h>

// beast::string_view = std::string_view (this is the only file that includes Beast).
#define BOOST_BEAST_USE_STD_STRING_VIEW 1

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include "encoding/encode.h"
#include "encoding/request.h"
#include "json/value.h"
#include "server/inference_queue.h"
#include "server/metrics.h"
#include "server/openapi.h"
#include "server/request_id.h"

namespace clef::server {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

enum class Route { SystemOne, Health, Models, Metrics, OpenApi, Unknown };

Route route_of(std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
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

// The methods a route answers (the Allow header of its 405).
const char* route_allow(Route r) {
  return r == Route::SystemOne ? "POST" : "GET, HEAD";
}

// What the access log, metrics and Server-Timing need about one request; reset per request.
struct RequestContext {
  bool counted = false;  // in in_flight (from its header on, or from its error answer on)
  Clock::time_point start;
  // Server-Timing phases of a /v1/systemone request (ms; < 0 = not reached).
  double read_ms = -1, encode_ms = -1, queue_ms = -1, forward_ms = -1, answer_ms = -1;
  std::string id;
  std::string method;
  std::string origin;  // the request's Origin header (CORS)
  Route route = Route::Unknown;
  bool head = false;
  bool keep_alive = true;
  int64_t input_tokens = -1;
  int64_t truncated_state_tokens = 0;
};

// One answer before it becomes an HTTP response. Headers X-Request-Id, Content-Type,
// Content-Length, Connection, CORS and Server-Timing are added when it is written.
struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // Connection: close after it
};

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

Reply json_reply(int status, std::string body) {
  Reply r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Reply detail_reply(int status, const std::string& detail) {
  return json_reply(status, dump(ojson{{"detail", detail}}));
}

Reply validation_reply(const encoding::FieldError& e) {
  ojson loc = ojson::array();
  for (const auto& part : e.loc) loc.push_back(part);
  ojson item{{"loc", loc}, {"msg", e.msg}, {"type", e.type}};
  return json_reply(422, dump(ojson{{"detail", ojson::array({item})}}));
}

std::string trim_lower(std::string_view v) {
  size_t b = 0, e = v.size();
  while (b < e && std::isspace(static_cast<unsigned char>(v[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(v[e - 1]))) --e;
  std::string out(v.substr(b, e - b));
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// RFC 9110 methods: known, so a route answers them with 405 when it does not serve them. Any other
// method (BREW, PROPFIND, ...) is not implemented by this server at all: 501.
bool is_standard_method(http::verb v) {
  switch (v) {
    case http::verb::get:
    case http::verb::head:
    case http::verb::post:
    case http::verb::put:
    case http::verb::delete_:
    case http::verb::connect:
    case http::verb::options:
    case http::verb::trace:
    case http::verb::patch:
      return true;
    default:
      return false;
  }
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Handler threads: parse/validate/encode bodies and format answers, never socket I/O. Tasks still
// queued at stop() run before it returns.
class WorkerPool {
 public:
  explicit WorkerPool(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~WorkerPool() { stop(); }
  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

class Connection;

}  // namespace

namespace {

// Everything the connections share. One event-loop thread (Server::run) owns the acceptor, every
// connection and the registry; the worker pool and the engine worker only post back to it.
struct Core {
  Core(std::shared_ptr<service::Decider> d, ServerOptions o, Log& l)
      : decider(std::move(d)),
        opts(std::move(o)),
        log(l),
        info(decider->engine().info()),
        ioc(1),
        acceptor(ioc),
        accept_retry(ioc),
        pool(opts.worker_threads > 0
                 ? opts.worker_threads
                 : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u))),
        queue(decider->engine(), QueueOptions{opts.max_queue, opts.max_batch_tokens}, metrics),
        started_unix(static_cast<int64_t>(std::time(nullptr))) {
    openapi = openapi_document(opts.version, !opts.api_key.empty());
    cors_any = std::find(opts.cors_origins.begin(), opts.cors_origins.end(), "*") !=
               opts.cors_origins.end();
  }

  std::shared_ptr<service::Decider> decider;
  ServerOptions opts;
  Log& log;
  engine::EngineInfo info;
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
  bool draining = false;  // event-loop thread's view of shutting_down
  std::atomic<size_t> in_flight{0};
  std::mutex idle_mutex;
  std::condition_variable idle_cv;
  std::unordered_set<Connection*> connections;  // event-loop thread only
  bool refusing = false;                        // last accept was over --max-connections

  std::string display_name() const {
    return opts.served_model_names.empty() ? opts.model_name : opts.served_model_names.front();
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

  Reply handle_get(Route route);
  Reply health();
  Reply models();
  Reply metrics_text();
};

// A job on the worker pool: one /v1/systemone request from its body to its answer. It keeps the
// event loop alive (work guard) until the answer is posted back to the connection.
struct SystemOneJob {
  std::shared_ptr<Connection> conn;
  std::string body;
  RequestContext ctx;
  Reply reply;
  service::Prepared prepared;
  std::optional<QueueResult> result;
  std::exception_ptr error;
  net::executor_work_guard<net::io_context::executor_type> work;
};

void handle_systemone(Core& core, const std::shared_ptr<SystemOneJob>& job);
void finish_systemone(Core& core, const std::shared_ptr<SystemOneJob>& job);
void complete(Core& core, const std::shared_ptr<SystemOneJob>& job);

// One client connection, driven by the event loop. Phases: Idle (keep-alive, no byte of the next
// request yet; idle deadline) -> Header (header deadline) -> Body (body deadline) -> Handling (no
// deadline: the engine decides) -> Writing (write deadline) -> Idle again, or Closing (the socket's
// send side is shut, whatever the client still sends is read and dropped for a moment so that it
// sees the answer rather than a reset). Requests on one connection are answered in order: the next
// pipelined request is parsed from the buffer only after the previous answer was written.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Phase { Idle, Header, Body, Handling, Writing, Closing };

  Connection(Core& core, tcp::socket sock)
      : core_(core), sock_(std::move(sock)), timer_(core.ioc) {}

  void start() {
    beast::error_code ec;
    // Nagle off: a small answer must not wait for the client's delayed ACK (served-path tests).
    sock_.set_option(tcp::no_delay(true), ec);
    auto ep = sock_.remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string();
    core_.connections.insert(this);
    new_request();
  }

  // Over --max-connections: one 503 with Connection: close, then close. Not registered.
  void refuse() {
    beast::error_code ec;
    sock_.set_option(tcp::no_delay(true), ec);
    refused_ = true;
    ctx_.id = core_.ids.next();
    Reply r = detail_reply(503, "Too many open connections; retry later");
    r.headers.emplace_back("Retry-After", "1");
    r.close = true;
    reply(std::move(r));
  }

  Phase phase() const { return phase_; }

  void close() {
    if (closed_) return;
    closed_ = true;
    disarm();
    beast::error_code ec;
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
    if (!refused_) core_.connections.erase(this);
    if (ctx_.counted) {  // a request abandoned before its answer (client gone, deadline)
      ctx_.counted = false;
      core_.request_done();
    }
  }

  // Event-loop thread: the answer of a request handed to the worker pool.
  void reply(Reply r);
  RequestContext& ctx() { return ctx_; }

 private:
  void new_request() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(
        std::min<size_t>(core_.opts.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
    // No body limit while the header is read: a Content-Length over the limit is refused by us,
    // after the key check (401 before 413). The real limit is set once the header is accepted.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    ctx_ = RequestContext{};
    body_read_ = false;
    if (core_.draining && buf_.size() == 0) return close();
    buf_.shrink_to_fit();
    if (buf_.size() > 0) {
      phase_ = Phase::Header;
      arm(core_.opts.header_timeout_s);
    } else {
      phase_ = Phase::Idle;
      arm(core_.opts.idle_timeout_s);
    }
    parse();
  }

  void arm(double secs) {
    ++timer_gen_;
    timer_.expires_after(seconds(secs));
    timer_.async_wait([self = shared_from_this(), g = timer_gen_](beast::error_code ec) {
      if (ec || g != self->timer_gen_) return;
      self->on_timeout();
    });
  }
  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  void on_timeout() {
    timed_out_ = true;
    if ((phase_ == Phase::Header || phase_ == Phase::Body) && reading_) {
      beast::error_code ec;
      sock_.cancel(ec);  // the read completes with operation_aborted -> on_deadline()
      return;
    }
    if (phase_ == Phase::Handling) return;  // never armed while handling
    close();
  }

  // A request not complete within its deadline: 408, then close. An idle connection just closes.
  void on_deadline() {
    timed_out_ = false;
    if (phase_ == Phase::Header || phase_ == Phase::Body) {
      Reply r = detail_reply(408, phase_ == Phase::Header ? "Request header not received in time"
                                                          : "Request body not received in time");
      r.close = true;
      return reply(std::move(r));
    }
    close();
  }

  void read_more() {
    reading_ = true;
    const size_t n = phase_ == Phase::Body ? 65536 : 4096;
    sock_.async_read_some(buf_.prepare(n),
                          [self = shared_from_this()](beast::error_code ec, size_t got) {
                            self->reading_ = false;
                            self->on_read(ec, got);
                          });
  }

  void on_read(beast::error_code ec, size_t got) {
    if (closed_) return;
    if (timed_out_) return on_deadline();
    if (ec) return close();  // end of stream, reset, or closed by the drain
    buf_.commit(got);
    if (phase_ == Phase::Idle) {
      phase_ = Phase::Header;
      arm(core_.opts.header_timeout_s);
    }
    parse();
  }

  void parse() {
    for (;;) {
      if (phase_ == Phase::Header && parser_->is_header_done()) return on_header();
      if (phase_ == Phase::Body && parser_->is_done()) return on_body();
      if (buf_.size() == 0) break;
      beast::error_code ec;
      const size_t used = parser_->put(buf_.data(), ec);
      buf_.consume(used);
      if (ec == http::error::need_more) break;
      if (ec) return on_parse_error(ec);
      if (phase_ == Phase::Idle) {
        phase_ = Phase::Header;
        arm(core_.opts.header_timeout_s);
      }
    }
    read_more();
  }

  void on_parse_error(beast::error_code ec) {
    Reply r;
    if (ec == http::error::header_limit) {
      r = detail_reply(431, "Request header fields too large");
    } else if (ec == http::error::body_limit) {
      r = detail_reply(413, "Request body too large (limit " +
                                std::to_string(core_.opts.max_body_bytes) + " bytes)");
    } else if (ec == http::error::bad_content_length) {
      r = detail_reply(400, "Invalid or conflicting Content-Length");
    } else if (ec == http::error::bad_transfer_encoding) {
      r = detail_reply(400, "Transfer-Encoding must end with chunked");
    } else {
      r = detail_reply(400, "Malformed HTTP request: " + ec.message());
    }
    r.close = true;  // the framing is lost: nothing after this can be trusted
    reply(std::move(r));
  }

  void on_header();
  void on_body();
  void on_written(beast::error_code ec, bool close_after);
  void linger();
  void write_continue();

  Core& core_;
  tcp::socket sock_;
  net::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> res_;
  RequestContext ctx_;
  std::string remote_;
  Phase phase_ = Phase::Idle;
  bool reading_ = false;
  bool timed_out_ = false;
  bool closed_ = false;
  bool refused_ = false;
  bool body_read_ = false;
  bool has_body_ = false;
};

void Connection::on_header() {
  disarm();
  const auto& req = parser_->get();
  ctx_.counted = true;
  core_.request_started();
  ctx_.start = Clock::now();
  ctx_.method = std::string(req.method_string());
  ctx_.route = route_of(req.target());
  ctx_.head = req.method() == http::verb::head;
  ctx_.keep_alive = req.keep_alive();
  ctx_.origin = std::string(req[http::field::origin]);
  const std::string client_id(req["X-Request-Id"]);
  ctx_.id = is_acceptable_request_id(client_id) ? client_id : core_.ids.next();
  has_body_ = parser_->chunked() || parser_->content_length().value_or(0) > 0;

  // Checks that need no body byte, in the documented order; a refusal here closes the connection
  // when the request has a body (it is never read).
  const Route route = ctx_.route;
  if (!is_standard_method(req.method()))
    return reply(detail_reply(501, "Method not implemented: " + ctx_.method));
  if (route == Route::Unknown) return reply(detail_reply(404, "Not Found"));
  if (req.method() == http::verb::options) {
    const bool preflight =
        !ctx_.origin.empty() && req.find(http::field::access_control_request_method) != req.end();
    const std::string allow = std::string(route_allow(route)) + ", OPTIONS";
    if (!preflight) {
      Reply r;
      r.status = 204;
      r.content_type.clear();
      r.headers.emplace_back("Allow", allow);
      return reply(std::move(r));
    }
    if (!core_.origin_allowed(ctx_.origin))
      return reply(detail_reply(403, "CORS preflight refused: origin not allowed"));
    Reply r;
    r.status = 204;
    r.content_type.clear();
    r.headers.emplace_back("Access-Control-Allow-Methods", route_allow(route));
    r.headers.emplace_back("Access-Control-Allow-Headers",
                           "Authorization, Content-Type, X-Request-Id");
    r.headers.emplace_back("Access-Control-Max-Age", "600");
    return reply(std::move(r));
  }
  const bool post = route == Route::SystemOne;
  const bool allowed = post ? req.method() == http::verb::post
                            : (req.method() == http::verb::get || req.method() == http::verb::head);
  if (!allowed) {
    Reply r = detail_reply(405, "Method Not Allowed");
    r.headers.emplace_back("Allow", route_allow(route));
    return reply(std::move(r));
  }
  if (route != Route::Health && !core_.opts.api_key.empty() &&
      !core_.authorized(req[http::field::authorization])) {
    Reply r = detail_reply(401, "Not authenticated");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return reply(std::move(r));
  }
  if (req.find(http::field::transfer_encoding) != req.end() &&
      trim_lower(req[http::field::transfer_encoding]) != "chunked")
    return reply(detail_reply(501, "Transfer-Encoding other than chunked is not supported"));
  if (post && !parser_->chunked() && !parser_->content_length())
    return reply(detail_reply(411, "Content-Length or Transfer-Encoding: chunked required"));
  if (parser_->content_length() && *parser_->content_length() > core_.opts.max_body_bytes)
    return reply(detail_reply(413, "Request body too large (limit " +
                                       std::to_string(core_.opts.max_body_bytes) + " bytes)"));
  if (has_body_ && req.find(http::field::content_encoding) != req.end()) {
    const std::string enc = trim_lower(req[http::field::content_encoding]);
    if (enc != "identity")
      return reply(detail_reply(
          415, "Content-Encoding '" + enc + "' is not supported; send the body uncompressed"));
  }
  if (post && (req.find(http::field::content_type) == req.end() ||
               !is_json_content_type(std::string(req[http::field::content_type]))))
    return reply(detail_reply(415, "Content-Type must be application/json"));

  // Accepted: read the body, counted against the limit as it arrives (chunked included).
  parser_->body_limit(static_cast<std::uint64_t>(core_.opts.max_body_bytes));
  parser_->eager(true);
  phase_ = Phase::Body;
  arm(core_.opts.body_timeout_s);
  if (has_body_ && trim_lower(req[http::field::expect]) == "100-continue") return write_continue();
  parse();
}

void Connection::write_continue() {
  static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  net::async_write(sock_, net::buffer(kContinue),
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     if (self->closed_) return;
                     if (ec) return self->close();
                     self->parse();
                   });
}

void Connection::on_body() {
  disarm();
  body_read_ = true;
  phase_ = Phase::Handling;
  if (ctx_.route != Route::SystemOne) {
    Reply r;
    try {
      r = core_.handle_get(ctx_.route);
    } catch (const std::exception& e) {
      core_.log.error("internal_error", {{"id", ctx_.id}, {"error", e.what()}});
      r = detail_reply(500, "Internal Server Error");
    }
    return reply(std::move(r));
  }
  const auto handler_start = Clock::now();
  ctx_.read_ms = ms_between(ctx_.start, handler_start);
  auto job = std::make_shared<SystemOneJob>(SystemOneJob{shared_from_this(),
                                                         parser_->release().body(),
                                                         ctx_,
                                                         {},
                                                         {},
                                                         {},
                                                         {},
                                                         net::make_work_guard(core_.ioc)});
  Core& core = core_;
  core_.pool.post([&core, job] {
    try {
      handle_systemone(core, job);
    } catch (const std::exception& e) {
      core.log.error("internal_error", {{"id", job->ctx.id}, {"error", e.what()}});
      job->reply = detail_reply(500, "Internal Server Error");
      complete(core, job);
    }
  });
}

void Connection::reply(Reply r) {
  if (closed_) return;
  if (!ctx_.counted && !refused_) {  // answered before its header was complete (400, 408, 431)
    ctx_.counted = true;
    core_.request_started();
    if (ctx_.id.empty()) ctx_.id = core_.ids.next();
    if (ctx_.start == Clock::time_point{}) ctx_.start = Clock::now();
  }
  disarm();
  const bool close_after =
      r.close || refused_ || !ctx_.keep_alive || core_.draining || (has_body_ && !body_read_);
  res_.emplace(static_cast<http::status>(r.status), 11);
  if (!r.content_type.empty()) res_->set(http::field::content_type, r.content_type);
  res_->set("X-Request-Id", ctx_.id);
  for (const auto& [k, v] : r.headers) res_->set(k, v);
  if (!core_.opts.cors_origins.empty()) {
    if (core_.origin_allowed(ctx_.origin)) {
      res_->set(http::field::access_control_allow_origin, core_.cors_any ? "*" : ctx_.origin);
      res_->set(http::field::access_control_expose_headers,
                "X-Request-Id, Server-Timing, X-Clef-State-Truncated, Retry-After");
    }
    if (!core_.cors_any) res_->set(http::field::vary, "Origin");
  }
  res_->keep_alive(!close_after);
  const size_t body_size = r.body.size();
  if (ctx_.head) {
    res_->content_length(body_size);
  } else {
    res_->body() = std::move(r.body);
    if (r.status != 204) res_->prepare_payload();
  }
  // Counted before the response is written: a client that has its answer and then scrapes
  // /metrics sees it. Also the last moment before the write: Server-Timing's total ends here.
  const double secs =
      refused_ ? 0.0 : std::chrono::duration<double>(Clock::now() - ctx_.start).count();
  if (ctx_.route == Route::SystemOne) res_->set("Server-Timing", server_timing(ctx_, secs * 1e3));
  if (!refused_) core_.metrics.observe_request(route_label(ctx_.route), r.status, secs);
  phase_ = Phase::Writing;
  arm(core_.opts.body_timeout_s);
  // Header and body leave in one gather write.
  http::async_write(sock_, *res_,
                    [self = shared_from_this(), close_after](beast::error_code ec, size_t) {
                      self->on_written(ec, close_after);
                    });
}

void Connection::on_written(beast::error_code ec, bool close_after) {
  disarm();
  timed_out_ = false;
  if (!refused_ && ctx_.counted) {
    const double secs = std::chrono::duration<double>(Clock::now() - ctx_.start).count();
    ojson fields{{"id", ctx_.id},
                 {"method", ctx_.method},
                 {"path", route_label(ctx_.route)},
                 {"status", res_ ? static_cast<int>(res_->result_int()) : 0},
                 {"latency_ms", std::round(secs * 1e6) / 1e3},
                 {"remote", remote_}};
    if (ctx_.input_tokens >= 0) fields["input_tokens"] = ctx_.input_tokens;
    if (ctx_.truncated_state_tokens > 0)
      fields["truncated_state_tokens"] = ctx_.truncated_state_tokens;
    core_.log.info("access", fields);
    ctx_.counted = false;
    core_.request_done();
  }
  res_.reset();
  if (closed_) return;
  if (ec) return close();
  if (close_after) return linger();
  new_request();
}

// Shut the send side, then read and drop what the client still sends (the rest of a refused body)
// for a moment, so that it reads our answer instead of a connection reset.
void Connection::linger() {
  phase_ = Phase::Closing;
  beast::error_code ec;
  sock_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  arm(2.0);
  buf_.clear();
  struct Drop {
    std::shared_ptr<Connection> self;
    void operator()(beast::error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->close();
      self->sock_.async_read_some(self->buf_.prepare(65536), std::move(*this));
    }
  };
  sock_.async_read_some(buf_.prepare(65536), Drop{shared_from_this()});
}

void Core::accept() {
  acceptor.async_accept(
      [this](beast::error_code ec, tcp::socket sock) { on_accept(ec, std::move(sock)); });
}

void Core::on_accept(beast::error_code ec, tcp::socket sock) {
  if (!acceptor.is_open()) return;  // shutting down
  if (ec) {
    // Out of file descriptors (or another transient failure): wait a little instead of spinning.
    log.warn("accept_failed", {{"error", ec.message()}});
    accept_retry.expires_after(std::chrono::milliseconds(100));
    accept_retry.async_wait([this](beast::error_code e) {
      if (!e && acceptor.is_open()) accept();
    });
    return;
  }
  if (draining) {
    beast::error_code ignored;
    sock.close(ignored);
  } else if (connections.size() >= opts.max_connections) {
    if (!refusing)
      log.warn("connections_refused", {{"max_connections", opts.max_connections},
                                       {"note", "answering 503 until connections close"}});
    refusing = true;
    std::make_shared<Connection>(*this, std::move(sock))->refuse();
  } else {
    refusing = false;
    std::make_shared<Connection>(*this, std::move(sock))->start();
  }
  accept();
}

void Core::drain() {
  draining = true;
  beast::error_code ec;
  acceptor.close(ec);
  accept_retry.cancel();
  std::vector<std::shared_ptr<Connection>> idle;
  for (Connection* c : connections)
    if (c->phase() == Connection::Phase::Idle) idle.push_back(c->shared_from_this());
  for (auto& c : idle) c->close();
}

Reply Core::handle_get(Route route) {
  switch (route) {
    case Route::Health:
      return health();
    case Route::Models:
      return models();
    case Route::Metrics:
      return metrics_text();
    case Route::OpenApi:
      return json_reply(200, openapi);
    default:
      return detail_reply(404, "Not Found");
  }
}

Reply Core::health() {
  if (shutting_down) return detail_reply(503, "The server is shutting down");
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
  return json_reply(200, dump(h));
}

Reply Core::models() {
  ojson data = ojson::array();
  auto add = [&](const std::string& name) {
    data.push_back(ojson{
        {"id", name}, {"object", "model"}, {"created", started_unix}, {"owned_by", "clefserve"}});
  };
  if (opts.served_model_names.empty()) add(opts.model_name);
  for (const auto& n : opts.served_model_names) add(n);
  return json_reply(200, dump(ojson{{"object", "list"}, {"data", data}}));
}

Reply Core::metrics_text() {
  Gauges g;
  g.queue_depth = queue.depth();
  g.queue_capacity = queue.capacity();
  g.in_flight = in_flight.load();
  g.gpu_memory_used_bytes = opts.gpu_memory_used ? opts.gpu_memory_used() : -1;
  Reply r;
  r.body = metrics.render(g);
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return r;
}

// Worker pool: the body was read completely by the event loop; parse, validate, encode, queue.
// No shutting-down check: a request that got this far is in flight and is finished in the drain.
void handle_systemone(Core& core, const std::shared_ptr<SystemOneJob>& job) {
  const auto handler_start = Clock::now();
  auto done = [&](Reply r) {
    job->reply = std::move(r);
    complete(core, job);
  };
  json::ParseError perr;
  auto body = json::parse(job->body, &perr);
  if (!body) return done(detail_reply(400, "Malformed JSON: " + perr.message));
  std::string().swap(job->body);

  const auto& dopts = core.decider->options();
  auto& prepared = job->prepared;
  try {
    prepared.request = encoding::validate_request(*body, dopts.limits);
  } catch (const encoding::RequestError& e) {
    if (e.status == 422) return done(validation_reply(e.error));
    return done(detail_reply(e.status, e.error.msg));
  }
  const auto& names = core.opts.served_model_names;
  if (!names.empty() &&
      std::find(names.begin(), names.end(), prepared.request.model) == names.end()) {
    return done(detail_reply(404, "The model '" + prepared.request.model + "' is not served here"));
  }
  try {
    prepared.encoded = encoding::encode_request(prepared.request,
                                                *core.decider->release().tokenizer, dopts.encode);
  } catch (const encoding::RequestError& e) {
    if (e.status == 422) return done(validation_reply(e.error));
    return done(detail_reply(e.status, e.error.msg));
  }
  job->ctx.encode_ms = ms_between(handler_start, Clock::now());
  // The engine worker calls back; the answer is formatted on the pool again, not on the engine's
  // thread.
  const bool queued =
      core.queue.submit(prepared.encoded, [&core, job](QueueResult* r, std::exception_ptr err) {
        if (r) job->result = std::move(*r);
        job->error = err;
        core.pool.post([&core, job] { finish_systemone(core, job); });
      });
  if (!queued) {
    Reply r = detail_reply(429, "The request queue is full; retry later");
    r.headers.emplace_back("Retry-After", "1");
    return done(std::move(r));
  }
}

void finish_systemone(Core& core, const std::shared_ptr<SystemOneJob>& job) {
  auto& ctx = job->ctx;
  json::Value answer;
  try {
    if (job->error) std::rethrow_exception(job->error);
    const QueueResult& out = *job->result;
    const auto answer_start = Clock::now();
    ctx.queue_ms = out.queue_s * 1e3;
    ctx.forward_ms = out.forward_s * 1e3;
    answer = core.decider->finish(job->prepared, out.output);
    ctx.answer_ms = ms_between(answer_start, Clock::now());
  } catch (const std::exception& e) {
    // Engine failures and non-finite probabilities: logged with the id, never sent to the client.
    core.log.error("internal_error", {{"id", ctx.id}, {"error", e.what()}});
    job->reply = detail_reply(500, "Internal Server Error (request id " + ctx.id + ")");
    return complete(core, job);
  }
  const auto& enc = job->prepared.encoded;
  ctx.input_tokens = static_cast<int64_t>(enc.input_ids.size());
  ctx.truncated_state_tokens = enc.truncated_state_tokens;
  core.metrics.add_tokens(enc.input_ids.size(), static_cast<size_t>(enc.truncated_state_tokens));
  Reply r = json_reply(200, json::dumps(answer));
  if (enc.truncated_state_tokens > 0)
    r.headers.emplace_back("X-Clef-State-Truncated", std::to_string(enc.truncated_state_tokens));
  job->reply = std::move(r);
  complete(core, job);
}

// Back to the event loop with the answer.
void complete(Core& core, const std::shared_ptr<SystemOneJob>& job) {
  net::post(core.ioc, [job] {
    auto conn = std::move(job->conn);
    conn->ctx() = job->ctx;
    conn->reply(std::move(job->reply));
  });
}

}  // namespace

struct Server::Impl : Core {
  using Core::Core;
};

Server::Server(std::shared_ptr<service::Decider> decider, ServerOptions opts, Log& log)
    : impl_(std::make_unique<Impl>(std::move(decider), std::move(opts), log)) {}

Server::~Server() {
  begin_shutdown();
  impl_->queue.stop();  // runs what is queued; its callbacks post to the pool
  impl_->pool.stop();   // runs what is posted; answers go to the (stopped) event loop, dropped
}

int Server::bind() {
  Core& c = *impl_;
  // Every open connection is a file descriptor: allow as many as the hard limit does.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  const std::string where = c.opts.host + ":" + std::to_string(c.opts.port);
  try {
    tcp::resolver resolver(c.ioc);
    auto results = resolver.resolve(c.opts.host, std::to_string(c.opts.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service);
    if (results.empty()) throw std::runtime_error("no address");
    const tcp::endpoint ep = results.begin()->endpoint();
    c.acceptor.open(ep.protocol());
    // SO_REUSEADDR only (restart while old connections linger in TIME_WAIT); never SO_REUSEPORT,
    // which would let a second server share the port silently.
    c.acceptor.set_option(net::socket_base::reuse_address(true));
    c.acceptor.bind(ep);
    c.acceptor.listen(net::socket_base::max_listen_connections);
    return c.acceptor.local_endpoint().port();
  } catch (const std::exception&) {
    beast::error_code ec;
    c.acceptor.close(ec);
    throw std::runtime_error("cannot listen on " + where +
                             " (address in use, or not an address of this machine)");
  }
}

void Server::run() {
  Core& c = *impl_;
  if (c.acceptor.is_open()) net::post(c.ioc, [&c] { c.accept(); });
  for (;;) {
    try {
      c.ioc.run();  // returns once the acceptor is closed and every connection has ended
      return;
    } catch (const std::exception& e) {
      c.log.error("internal_error", {{"where", "event loop"}, {"error", e.what()}});
    }
  }
}

void Server::begin_shutdown() {
  Core& c = *impl_;
  c.shutting_down = true;
  net::post(c.ioc, [&c] { c.drain(); });
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

#include "server/connection.h"

#include <chrono>
#include <cmath>
#include <exception>
#include <vector>

#include "server/request_id.h"
#include "server/routes.h"
#include "server/systemone.h"

namespace clef::server::detail {

void Connection::on_header() {
  disarm();
  const auto& req = parser_->get();
  ctx_.counted = true;
  core_.request_started();
  ctx_.start = Clock::now();
  ctx_.method = std::string(req.method_string());
  ctx_.route = route_of(req.target());
  if (!core_.opts.ui && (ctx_.route == Route::Ui || ctx_.route == Route::UiAsset))
    ctx_.route = Route::Unknown;  // --no-ui
  ctx_.head = req.method() == http::verb::head;
  ctx_.keep_alive = req.keep_alive();
  ctx_.origin = std::string(req[http::field::origin]);
  const std::string client_id(req["X-Request-Id"]);
  ctx_.id = is_acceptable_request_id(client_id) ? client_id : core_.ids.next();
  has_body_ = parser_->chunked() || parser_->content_length().value_or(0) > 0;

  // Framing first (RFC 9112 §3.2, §6.1): with no Host (or two) on HTTP/1.1, or a body length that
  // cannot be known, nothing else about the request can be trusted; answer and close.
  auto refuse_framing = [this](int status, const std::string& why) {
    Reply r = detail_reply(status, why);
    r.close = true;
    reply(std::move(r));
  };
  if (req.version() >= 11 && req.count(http::field::host) != 1)
    return refuse_framing(400, req.count(http::field::host) == 0 ? "A Host header is required"
                                                                 : "More than one Host header");
  if (req.find(http::field::transfer_encoding) != req.end()) {
    std::string te;
    for (auto [it, end] = req.equal_range(http::field::transfer_encoding); it != end; ++it)
      te += (te.empty() ? "" : ",") + trim_lower(it->value());
    const std::string last =
        trim_lower(te.substr(te.rfind(',') == std::string::npos ? 0 : te.rfind(',') + 1));
    if (last != "chunked")
      return refuse_framing(400, "Transfer-Encoding must end in chunked (body length unknown)");
    if (te != "chunked")
      return refuse_framing(501, "Transfer codings other than chunked are not supported");
  }

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
  // The key guards the API; the playground's static files hold nothing secret and a browser
  // cannot send a bearer key when it opens a page: they are served without it, like /health.
  const bool open_route = route == Route::Health || route == Route::Live || route == Route::Ui ||
                          route == Route::UiAsset;
  if (!open_route && !core_.opts.api_key.empty() &&
      !core_.authorized(req[http::field::authorization])) {
    Reply r = detail_reply(401, "Not authenticated");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return reply(std::move(r));
  }
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
      r = handle_get(core_, ctx_.route, parser_->get().target());
    } catch (const std::exception& e) {
      core_.log.error("internal_error", {{"id", ctx_.id}, {"error", e.what()}});
      r = detail_reply(500, "Internal Server Error");
    }
    return reply(std::move(r));
  }
  const auto handler_start = Clock::now();
  ctx_.read_ms = ms_between(ctx_.start, handler_start);
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  auto job = std::make_shared<SystemOneJob>(SystemOneJob{shared_from_this(),
                                                         parser_->release().body(),
                                                         ctx_,
                                                         {},
                                                         {},
                                                         {},
                                                         {},
                                                         cancel_,
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
  watch_client();
}

// Handling: a read posted so that a client which leaves is noticed at once. Bytes that arrive are
// the next pipelined request's: kept in the buffer (up to a bound) for after the answer.
void Connection::watch_client() {
  watching_ = true;
  sock_.async_read_some(
      buf_.prepare(4096),
      [self = shared_from_this()](beast::error_code ec, size_t got) { self->on_watch(ec, got); });
}

void Connection::on_watch(beast::error_code ec, size_t got) {
  watching_ = false;
  if (closed_) return;
  if (!ec) buf_.commit(got);
  if (resume_ != Resume::None) {  // the answer was written while this read was outstanding
    const Resume r = resume_;
    resume_ = Resume::None;
    return r == Resume::Linger ? linger() : new_request();
  }
  if (phase_ != Phase::Handling) return;  // reply() cancelled this read; the write is under way
  if (!ec) {
    if (buf_.size() < 65536) watch_client();
    return;
  }
  if (ec == net::error::operation_aborted) return;
  // End of stream or reset: the client has gone. Its request leaves the queue unrun (or, already
  // in a forward pass, finishes unanswered); the answer's arrival is logged as 499.
  client_gone_ = true;
  if (cancel_) cancel_->store(true);
}

// The answer of a request whose client has gone: nothing to write; logged and counted as 499.
void Connection::client_left() {
  const double secs = std::chrono::duration<double>(Clock::now() - ctx_.start).count();
  core_.metrics.observe_request(route_label(ctx_.route), 499, secs);
  if (ctx_.counted) {
    ojson fields{{"id", ctx_.id},
                 {"method", ctx_.method},
                 {"path", route_label(ctx_.route)},
                 {"status", 499},
                 {"latency_ms", std::round(secs * 1e6) / 1e3},
                 {"remote", remote_},
                 {"error", "client closed"},
                 {"reached_engine", ctx_.forward_ms >= 0}};
    core_.log.info("access", fields);
    ctx_.counted = false;
    core_.request_done();
  }
  close();
}

void Connection::reply(Reply r) {
  if (closed_) return;
  if (client_gone_) return client_left();
  if (watching_) {
    beast::error_code ec;
    sock_.cancel(ec);  // only the watch read is outstanding; the answer's write starts below
  }
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
  if (watching_) {  // the cancelled watch read has not ended yet: it resumes from here
    resume_ = close_after ? Resume::Linger : Resume::Next;
    return;
  }
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

}  // namespace clef::server::detail

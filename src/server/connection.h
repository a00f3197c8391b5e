// One client connection's transport state machine on the event loop: deadlines, limits, the
// header checks, reading the body, writing answers, keep-alive, pipelining, lingering close.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "server/core.h"
#include "server/http_util.h"
#include "server/net.h"
#include "server/request_context.h"

namespace clef::server::detail {

// One client connection, driven by the event loop. Phases: Idle (keep-alive, no byte of the next
// request yet; idle deadline) -> Header (header deadline) -> Body (body deadline) -> Handling (no
// deadline: the engine decides) -> Writing (write deadline) -> Idle again, or Closing (the socket's
// send side is shut, whatever the client still sends is read and dropped for a moment so that it
// sees the answer rather than a reset). Requests on one connection are answered in order: the next
// pipelined request is parsed from the buffer only after the previous answer was written. While a
// /v1/systemone request is Handling, one read stays posted to notice the client leaving (its
// request is then cancelled: dropped from the queue, logged 499) and to keep pipelined bytes.
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
  void watch_client();
  void on_watch(beast::error_code ec, size_t got);
  void client_left();

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
  // While a /v1/systemone request is handled, a read on the socket notices a client that leaves
  // (end of stream, reset): its request is cancelled, and answered in the log only (499).
  std::shared_ptr<std::atomic<bool>> cancel_;
  bool watching_ = false;     // that read is outstanding
  bool client_gone_ = false;  // it saw the client leave
  enum class Resume { None, Next, Linger };
  Resume resume_ = Resume::None;  // what on_written left for the watch read's end to do
};

}  // namespace clef::server::detail

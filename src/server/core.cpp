#include "server/core.h"

#include <vector>

#include "server/connection.h"

namespace clef::server::detail {

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

}  // namespace clef::server::detail

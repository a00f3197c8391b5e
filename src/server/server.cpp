#include "server/server.h"

#include <sys/resource.h>

#include <stdexcept>
#include <string>

#include "server/core.h"
#include "server/net.h"

namespace clef::server {

namespace net = detail::net;
namespace beast = detail::beast;
using detail::Core;
using detail::tcp;

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

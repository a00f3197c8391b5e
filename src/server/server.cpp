#include "server/server.h"

#include <sys/resource.h>
#include <unistd.h>

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

Server::Server(std::shared_ptr<service::Decider> decider, std::vector<QueueEngine> engines,
               ServerOptions opts, Log& log)
    : impl_(std::make_unique<Impl>(std::move(decider), std::move(engines), std::move(opts), log)) {}

Server::~Server() {
  begin_shutdown();
  impl_->queue.stop();  // runs what is queued; its callbacks post to the pool
  impl_->pool.stop();   // runs what is posted; answers go to the (stopped) event loop, dropped
  if (impl_->opts.listener_fd >= 0) ::close(impl_->opts.listener_fd);  // never bound
}

namespace {

// Every open connection is a file descriptor: allow as many as the hard limit does.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

void open_acceptor(tcp::acceptor& acceptor, net::io_context& ioc, const std::string& host,
                   int port) {
  const std::string where = host + ":" + std::to_string(port);
  try {
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(host, std::to_string(port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service);
    if (results.empty()) throw std::runtime_error("no address");
    const tcp::endpoint ep = results.begin()->endpoint();
    acceptor.open(ep.protocol());
    // SO_REUSEADDR only (restart while old connections linger in TIME_WAIT); never SO_REUSEPORT,
    // which would let a second server share the port silently.
    acceptor.set_option(net::socket_base::reuse_address(true));
    acceptor.bind(ep);
    acceptor.listen(net::socket_base::max_listen_connections);
  } catch (const std::exception& e) {
    beast::error_code ec;
    acceptor.close(ec);
    const auto* se = dynamic_cast<const boost::system::system_error*>(&e);
    throw std::runtime_error("cannot listen on " + where + ": " +
                             (se ? se->code().message() : std::string(e.what())) +
                             " (port in use, or not an address of this machine)");
  }
}

}  // namespace

Listener::Listener(const std::string& host, int port) {
  raise_fd_limit();
  net::io_context ioc(1);
  tcp::acceptor acceptor(ioc);
  open_acceptor(acceptor, ioc, host, port);
  port_ = acceptor.local_endpoint().port();
  v6_ = acceptor.local_endpoint().address().is_v6();
  fd_ = acceptor.release();
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}

int Listener::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

int Server::bind() {
  Core& c = *impl_;
  raise_fd_limit();
  if (c.opts.listener_fd >= 0) {  // opened before the model loaded (Listener)
    const int fd = c.opts.listener_fd;
    c.opts.listener_fd = -1;
    c.acceptor.assign(c.opts.listener_v6 ? tcp::v6() : tcp::v4(), fd);
  } else {
    open_acceptor(c.acceptor, c.ioc, c.opts.host, c.opts.port);
  }
  return c.acceptor.local_endpoint().port();
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

void Server::stop_ready() {
  impl_->ready = false;
}

void Server::begin_shutdown() {
  Core& c = *impl_;
  c.ready = false;
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

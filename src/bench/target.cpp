#include "bench/target.h"

#include <chrono>

namespace clef::bench {

Target parse_target(const std::string& url) {
  Target t;
  t.url = url;
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos)
    throw UrlError("URL '" + url + "' has no scheme (http:// or https://)");
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https")
    throw UrlError("URL '" + url + "': scheme must be http or https");
  const auto rest = url.substr(scheme_end + 3);
  const auto slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : rest.substr(slash);
  if (authority.empty()) throw UrlError("URL '" + url + "' has no host");
  if (authority.find('@') != std::string::npos)
    throw UrlError("URL '" + url + "': credentials in the URL are not supported (use --api-key)");
  if (path.find_first_of("?#") != std::string::npos)
    throw UrlError("URL '" + url + "': a query or fragment is not supported");
  // Host without the port; IPv6 literals keep their brackets stripped for the locality test.
  std::string host = authority;
  if (!host.empty() && host[0] == '[') {
    const auto close = host.find(']');
    if (close == std::string::npos) throw UrlError("URL '" + url + "': unclosed IPv6 bracket");
    host = host.substr(1, close - 1);
  } else if (const auto colon = host.rfind(':'); colon != std::string::npos) {
    const std::string port = host.substr(colon + 1);
    if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
        port.size() > 5 || std::stoi(port) == 0 || std::stoi(port) > 65535)
      throw UrlError("URL '" + url + "': bad port '" + port + "'");
    host = host.substr(0, colon);
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  const std::string suffix = "/v1/systemone";
  if (path.size() >= suffix.size() &&
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0)
    path.resize(path.size() - suffix.size());
  t.scheme_host_port = scheme + "://" + authority;
  t.host = host;
  t.base_path = path;
  t.local = host == "localhost" || host == "::1" || host == "0.0.0.0" || host.rfind("127.", 0) == 0;
  return t;
}

std::unique_ptr<httplib::Client> make_client(const Target& t, const ClientOptions& opts) {
  auto cli = std::make_unique<httplib::Client>(t.scheme_host_port);
  const auto timeout = std::chrono::duration<double>(opts.timeout_s);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(timeout).count();
  const time_t sec = static_cast<time_t>(us / 1000000);
  const time_t usec = static_cast<time_t>(us % 1000000);
  cli->set_connection_timeout(sec, usec);
  cli->set_read_timeout(sec, usec);
  cli->set_write_timeout(sec, usec);
  cli->set_keep_alive(true);
  // The client writes the headers and the body in separate send() calls: with Nagle on, the body
  // waits for the server's delayed ACK of the headers, ~40 ms on every request.
  cli->set_tcp_nodelay(true);
  return cli;
}

httplib::Headers request_headers(const ClientOptions& opts) {
  httplib::Headers h;
  if (!opts.api_key.empty()) h.emplace("Authorization", "Bearer " + opts.api_key);
  return h;
}

}  // namespace clef::bench

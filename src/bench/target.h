// Where the bench sends requests: a base URL (http[s]://host[:port][/prefix]; a trailing
// /v1/systemone is accepted and stripped) and the keep-alive HTTP clients it uses (one per
// concurrent worker).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include <httplib.h>

namespace clef::bench {

struct Target {
  std::string url;               // as given
  std::string scheme_host_port;  // "http://127.0.0.1:8000"
  std::string host;
  std::string base_path;  // "" or "/prefix"
  bool local = false;     // host is this machine (then local nvidia-smi describes its GPU)
  std::string decide_path() const { return base_path + "/v1/systemone"; }
  std::string health_path() const { return base_path + "/health"; }
  std::string metrics_path() const { return base_path + "/metrics"; }
};

struct UrlError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

Target parse_target(const std::string& url);

struct ClientOptions {
  double timeout_s = 120.0;  // connect, read and write timeouts
  std::string api_key;       // sent as "Authorization: Bearer KEY" when non-empty
};

std::unique_ptr<httplib::Client> make_client(const Target& t, const ClientOptions& opts);
httplib::Headers request_headers(const ClientOptions& opts);

}  // namespace clef::bench

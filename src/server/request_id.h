// X-Request-Id handling: a client's id is echoed when it is a sane token, else a fresh one is made.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace clef::server {

// True for 1..128 visible ASCII characters (no spaces or control bytes): safe to echo and to log.
bool is_acceptable_request_id(std::string_view id);

class RequestIdGenerator {
 public:
  RequestIdGenerator();
  std::string next();  // 32 lowercase hex digits, unique per process run

 private:
  uint64_t seed_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace clef::server

#include "server/request_id.h"

#include <cstdio>
#include <random>

namespace clef::server {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

bool is_acceptable_request_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (unsigned char c : id) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

RequestIdGenerator::RequestIdGenerator() {
  std::random_device rd;
  seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

std::string RequestIdGenerator::next() {
  // The counter keeps ids unique; the random seed keeps them unguessable across restarts.
  uint64_t n = counter_.fetch_add(1, std::memory_order_relaxed);
  uint64_t a = splitmix64(seed_ ^ n);
  uint64_t b = splitmix64(a ^ (n << 1 | 1));
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

}  // namespace clef::server

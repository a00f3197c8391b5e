// The parser's memory and time are bounded by the body size: an 8 MiB body of small
// values must not cost gigabytes before its refusal. This binary replaces the global operator new
// to count the bytes the parser holds at its peak (malloc_usable_size: what malloc really handed
// out, rounding included).
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <string>

#include "json/value.h"

namespace {

std::atomic<long long> g_live{0};
std::atomic<long long> g_peak{0};

void* counted_alloc(size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (!p) throw std::bad_alloc();
  const long long now = g_live += static_cast<long long>(malloc_usable_size(p));
  long long peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void counted_free(void* p) noexcept {
  if (!p) return;
  g_live -= static_cast<long long>(malloc_usable_size(p));
  std::free(p);
}

// Bytes held at the peak of f() beyond what was held when it started.
template <class F>
long long peak_bytes_of(F&& f) {
  const long long base = g_live.load();
  g_peak = base;
  f();
  return g_peak.load() - base;
}

}  // namespace

void* operator new(size_t n) {
  return counted_alloc(n);
}
void* operator new[](size_t n) {
  return counted_alloc(n);
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept {
  counted_free(p);
}
void operator delete[](void* p) noexcept {
  counted_free(p);
}
void operator delete(void* p, size_t) noexcept {
  counted_free(p);
}
void operator delete[](void* p, size_t) noexcept {
  counted_free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  counted_free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  counted_free(p);
}

namespace {

constexpr size_t kBody = 8u << 20;  // the server's default text body limit (8 MiB)
constexpr long long kMaxFactor = 16;
// Any other shape of small values: at most 17x, reached by one-element arrays ([[0],[0],...]: the
// element, the vector and its buffer, two malloc blocks, for 4 bytes of text).
constexpr long long kMaxFactorAnyShape = 18;

// `prefix` + "0,0,...,0" + `suffix`, kBody bytes in all.
std::string filled(const std::string& prefix, const std::string& item, const std::string& suffix) {
  std::string s = prefix;
  s.reserve(kBody);
  while (s.size() + 2 * item.size() + 1 + suffix.size() <= kBody) {
    s += item;
    s += ',';
  }
  s += item;
  s += suffix;
  return s;
}

// Parses `doc` and returns the peak bytes the parse (and the value it returns) held.
long long parse_peak(const std::string& doc, bool expect_ok) {
  return peak_bytes_of([&] {
    clef::json::ParseError err;
    auto v = clef::json::parse(doc, &err);
    EXPECT_EQ(v.has_value(), expect_ok) << err.message;
  });
}

TEST(JsonMemory, CounterSeesAllocations) {
  // The harness itself can fail: a 1 MiB vector must show up as about 1 MiB.
  const long long peak = peak_bytes_of([] { std::vector<char> v(1 << 20); });
  EXPECT_GE(peak, 1 << 20);
  EXPECT_LT(peak, (1 << 20) + 4096);
}

TEST(JsonMemory, ArrayOfZerosWithinSixteenTimesTheBody) {
  const std::string doc = filled("[", "0", "]");
  ASSERT_LE(doc.size(), kBody);
  ASSERT_GE(doc.size(), kBody - 4);
  const long long peak = parse_peak(doc, true);
  RecordProperty("peak_bytes", std::to_string(peak));
  std::printf("8 MiB [0,0,...]: parser peak %lld bytes = %.2fx the body\n", peak,
              static_cast<double>(peak) / static_cast<double>(doc.size()));
  EXPECT_LE(peak, kMaxFactor * static_cast<long long>(doc.size()));
}

TEST(JsonMemory, StateArrayRequestWithinSixteenTimesTheBody) {
  // The reported request: {"state":[0,0,...]} (no model: refused later, by validation).
  const std::string doc = filled("{\"state\":[", "0", "]}");
  EXPECT_LE(parse_peak(doc, true), kMaxFactor * static_cast<long long>(doc.size()));
}

TEST(JsonMemory, OtherSmallValueShapesWithinSeventeenTimesTheBody) {
  for (const char* item : {"[]", "{}", "[0]", "\"\"", "\"a\"", "true", "null", "1.5", "-1",
                           "{\"a\":0}", "12345678901234567890123"}) {
    const std::string doc = filled("[", item, "]");
    const long long peak = parse_peak(doc, true);
    std::printf("8 MiB [%s,...]: %.2fx\n", item,
                static_cast<double>(peak) / static_cast<double>(doc.size()));
    EXPECT_LE(peak, kMaxFactorAnyShape * static_cast<long long>(doc.size())) << item;
  }
  // A wide object, where duplicate detection needs an index.
  std::string obj = "{";
  for (int i = 0; obj.size() < kBody - 32; ++i) obj += "\"" + std::to_string(i) + "\":0,";
  obj += "\"end\":0}";
  EXPECT_LE(parse_peak(obj, true), kMaxFactorAnyShape * static_cast<long long>(obj.size()));
}

TEST(JsonMemory, InvalidDocumentsAreRefusedCheaply) {
  // Refused documents must not build what their valid prefix describes first: only pass 1's
  // element counts (4 bytes per container, in a growing vector: 3x that while it grows) and its
  // scratch strings. Building first cost 50x to 72x here.
  for (const std::string& doc :
       {filled("[", "0", ",]"), filled("{", "\"k\":0", ",x}"), filled("[", "[0]", "")}) {
    EXPECT_LE(parse_peak(doc, false), 4 * static_cast<long long>(doc.size()));
  }
}

TEST(JsonMemory, TimeIsLinear) {
  // 8 MiB of small values parses in well under a second (an earlier parser took 7 s); a quadratic
  // step would show as a large ratio between 1 MiB and 8 MiB.
  auto seconds = [](const std::string& doc) {
    const auto t0 = std::chrono::steady_clock::now();
    clef::json::ParseError err;
    EXPECT_TRUE(clef::json::parse(doc, &err).has_value()) << err.message;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::string small = "[";
  for (int i = 0; small.size() < (1u << 20); ++i) small += "0,";
  small += "0]";
  const std::string big = filled("[", "0", "]");
  seconds(small);  // warm up
  const double t_small = seconds(small), t_big = seconds(big);
  std::printf("parse 1 MiB %.3f s, 8 MiB %.3f s\n", t_small, t_big);
  // Linear: 8x the text takes about 8x the time (quadratic would be 64x); a margin for noise.
  EXPECT_LT(t_big, 30 * t_small + 0.05);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_UNDEFINED__)
  EXPECT_LT(t_big, 2.0);  // optimised build (sanitizers slow it ~10x)
#endif
}

}  // namespace

// The HTTP layer under hostile and careless clients: limits on every framing (chunked
// bodies counted as they arrive, Content-Encoding refused, the key checked before any body byte),
// HTTP/1.1 framing (duplicate/invalid Content-Length, 411, pipelining, Range ignored), deadlines
// (408), methods (405/501), slowloris, the connection cap, CORS and Connection: close in the drain.
// Raw sockets over loopback, so every byte (and its absence) is under the test's control.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 with -fsanitize=address reports false -Wmaybe-uninitialized inside std::regex's
// std::function members; the sanitizer build is -Werror too.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shared_server.h"

namespace clef::server_test {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

const char* const kSmall = kSmallRequest;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// One socket to the server; sends raw bytes, reads Content-Length framed responses (a response
// without Content-Length has no body here: 204, or an error that always carries one).
class Raw {
 public:
  explicit Raw(int port) : fd_(connect_loopback(port)) {}
  ~Raw() {
    if (fd_ >= 0) close(fd_);
  }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  bool send_raw(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // True when the server sent something (or closed) that has not been read yet.
  bool readable(int timeout_ms = 0) {
    if (!pending_.empty()) return true;
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, timeout_ms) > 0;
  }
  // The next response; status 0 when none arrived in time or the connection closed first.
  HttpResponse next(double timeout_s = 30) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      HttpResponse r;
      size_t used = parse(&r);
      if (used > 0) {
        pending_.erase(0, used);
        return r;
      }
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd_, POLLIN, 0};
      if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) return {};
      char buf[65536];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        return {};
      }
      pending_.append(buf, static_cast<size_t>(n));
    }
  }
  // True when the server closed the connection within the timeout (after what was read).
  bool closed_by_server(double timeout_s = 10) {
    if (closed_) return true;
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    char buf[4096];
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
    return false;
  }

 private:
  size_t parse(HttpResponse* r) const { return parse_response(pending_, r); }
  int fd_ = -1;
  bool closed_ = false;
  std::string pending_;
};

std::string post_head(const std::string& extra_headers) {
  return "POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         extra_headers + "\r\n";
}

void expect_detail(const HttpResponse& r, int status) {
  EXPECT_EQ(r.status, status) << r.body;
  json j = r.json();
  EXPECT_TRUE(j.is_object() && j["detail"].is_string()) << r.body;
}

// Resident set of a process, bytes (/proc/<pid>/status VmRSS).
long rss_bytes(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6) * 1024;
  return -1;
}

// ---- limits on every framing --------------------------------------------------------------------

// A chunked body is counted as it arrives: the client streams up to 1 GiB in 64 KiB chunks and
// stops once the server answered; the answer is 413 after about 32 MiB (the default
// --max-body-bytes), and the server's memory
// grows by far less than what was offered (the old server read it all: RSS 25 MB -> 2.1 GB).
TEST(HttpLimits, ChunkedBodyOverTheLimitIs413AndMemoryStaysSmall) {
  ServerProcess& srv = shared_server();
  ASSERT_TRUE(srv.started()) << srv.log();
  ASSERT_EQ(http(srv.port(), "GET", "/health").status, 200);
  const long before = rss_bytes(srv.pid());
  ASSERT_GT(before, 0);
  Raw c(srv.port());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c.send_raw(post_head("Transfer-Encoding: chunked\r\n")));
  const std::string chunk = "10000\r\n" + std::string(65536, 'a') + "\r\n";
  size_t sent = 0;
  while (sent < (size_t{1} << 30) && !c.readable() && c.send_raw(chunk)) sent += 65536;
  HttpResponse r = c.next(30);
  expect_detail(r, 413);
  EXPECT_GE(sent, size_t{32} << 20) << "answered before the limit was reached";
  EXPECT_LT(sent, size_t{96} << 20) << "the server kept reading far past the limit";
  const long after = rss_bytes(srv.pid());
  // The body is held up to the limit, so the server grows by about that much. Under
  // AddressSanitizer freed buffers stay resident in its quarantine and every block carries
  // redzones, so that build gets a looser bound (still far below the 1 GiB offered); the release
  // build's bound is the measurement that counts.
#if defined(__SANITIZE_ADDRESS__)
  constexpr long kGrowth = 160L << 20;
#else
  constexpr long kGrowth = 48L << 20;
#endif
  EXPECT_LT(after - before, kGrowth) << "RSS " << before << " -> " << after;
  // Still serving.
  EXPECT_EQ(http(srv.port(), "GET", "/health").status, 200);
}

TEST(HttpLimits, ContentEncodingOtherThanIdentityIs415) {
  int port = shared_port();
  for (const char* enc : {"gzip", "deflate", "br"}) {
    HttpResponse r = http(port, "POST", "/v1/systemone", kSmall,
                          {{"Content-Type", "application/json"}, {"Content-Encoding", enc}});
    expect_detail(r, 415);
  }
  HttpResponse ok = http(port, "POST", "/v1/systemone", kSmall,
                         {{"Content-Type", "application/json"}, {"Content-Encoding", "identity"}});
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// With --api-key, a client without the key gets 401 from its header alone: the server never waits
// for (or reads) the 512 MiB it announced. With the key, the same header gets 413 at once.
TEST(HttpLimits, KeyIsCheckedBeforeAnyBodyByteAnd401ComesBefore413) {
  ServerProcess srv({"--model", golden_model("tiny-r2"), "--api-key", "s3cret"});
  ASSERT_TRUE(srv.started()) << srv.log();
  const std::string huge = "Content-Length: 536870912\r\n";
  for (bool with_key : {false, true}) {
    SCOPED_TRACE(with_key ? "with the key" : "without the key");
    Raw c(srv.port());
    ASSERT_TRUE(c.ok());
    auto t0 = Clock::now();
    ASSERT_TRUE(c.send_raw(post_head(huge + (with_key ? "Authorization: Bearer s3cret\r\n" : ""))));
    HttpResponse r = c.next(10);
    expect_detail(r, with_key ? 413 : 401);
    EXPECT_LT(since(t0), 5.0);
    EXPECT_EQ(lower(r.header("connection")), "close");
    EXPECT_TRUE(c.closed_by_server(10));
  }
}

// ---- HTTP/1.1 framing
// -----------------------------------------------------------------------------

TEST(HttpFraming, RangeIsIgnoredOnPost) {
  int port = shared_port();
  HttpResponse plain = post_json(port, kSmall);
  ASSERT_EQ(plain.status, 200);
  HttpResponse ranged = post_json(port, kSmall, {{"Range", "bytes=0-10"}});
  EXPECT_EQ(ranged.status, 200);
  EXPECT_EQ(ranged.body, plain.body);
  EXPECT_EQ(ranged.header("content-range"), "");
}

TEST(HttpFraming, DuplicateOrInvalidContentLengthIs400AtOnce) {
  int port = shared_port();
  for (const char* cl : {"Content-Length: 10\r\nContent-Length: 12\r\n", "Content-Length: -5\r\n",
                         "Content-Length: 12abc\r\n", "Content-Length: 10, 12\r\n"}) {
    SCOPED_TRACE(cl);
    Raw c(port);
    ASSERT_TRUE(c.ok());
    auto t0 = Clock::now();
    ASSERT_TRUE(c.send_raw(post_head(cl)));
    HttpResponse r = c.next(10);
    expect_detail(r, 400);
    EXPECT_LT(since(t0), 2.0);
    EXPECT_TRUE(c.closed_by_server(10));
  }
}

// RFC 9112 §6.1: a Transfer-Encoding whose final coding is not chunked leaves the body length
// unknown: 400 and close (the bytes after it must never be read as a next request); chunked after
// a coding we do not implement: 501 and close.
TEST(HttpFraming, TransferEncodingNotEndingInChunkedIs400AndClose) {
  int port = shared_port();
  struct Case {
    const char* te;
    int status;
  };
  for (Case k :
       {Case{"Transfer-Encoding: gzip\r\n", 400}, Case{"Transfer-Encoding: chunked, gzip\r\n", 400},
        Case{"Transfer-Encoding: gzip, chunked\r\n", 501},
        Case{"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", 501}}) {
    SCOPED_TRACE(k.te);
    Raw c(port);
    ASSERT_TRUE(c.ok());
    // What follows the header would be a complete smuggled request if it were parsed as one.
    ASSERT_TRUE(c.send_raw(post_head(k.te) + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
    HttpResponse r = c.next(10);
    expect_detail(r, k.status);
    EXPECT_EQ(c.next(3).status, 0) << "a second answer: the body was parsed as a request";
    EXPECT_TRUE(c.closed_by_server(10));
  }
}

// RFC 9112 §3.2: an HTTP/1.1 request without Host, or with two, is 400; HTTP/1.0 needs none.
TEST(HttpFraming, Http11WithoutOrWithTwoHostHeadersIs400) {
  int port = shared_port();
  for (const char* req :
       {"GET /health HTTP/1.1\r\n\r\n", "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"}) {
    SCOPED_TRACE(req);
    Raw c(port);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c.send_raw(req));
    expect_detail(c.next(10), 400);
    EXPECT_TRUE(c.closed_by_server(10));
  }
  Raw c(port);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c.send_raw("GET /health HTTP/1.0\r\n\r\n"));
  EXPECT_EQ(c.next(10).status, 200);
}

TEST(HttpFraming, PostWithoutLengthIs411AtOnce) {
  Raw c(shared_port());
  ASSERT_TRUE(c.ok());
  auto t0 = Clock::now();
  ASSERT_TRUE(c.send_raw(post_head("")));
  HttpResponse r = c.next(10);
  expect_detail(r, 411);
  EXPECT_LT(since(t0), 2.0);
}

TEST(HttpFraming, ThreePipelinedRequestsAreAnsweredInOrder) {
  int port = shared_port();
  const std::string expected = decide(kSmall).output;
  Raw c(port);
  ASSERT_TRUE(c.ok());
  const std::string body = kSmall;
  ASSERT_TRUE(
      c.send_raw("GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: pipe-1\r\n\r\n"
                 "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nX-Request-Id: pipe-2\r\n"
                 "Content-Type: application/json\r\nContent-Length: " +
                 std::to_string(body.size()) + "\r\n\r\n" + body +
                 "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Request-Id: pipe-3\r\n\r\n"));
  HttpResponse a = c.next(30), b = c.next(30), m = c.next(30);
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.header("x-request-id"), "pipe-1");
  EXPECT_EQ(a.json()["status"], "ok");
  EXPECT_EQ(b.status, 200);
  EXPECT_EQ(b.header("x-request-id"), "pipe-2");
  EXPECT_EQ(b.body, expected);
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.header("x-request-id"), "pipe-3");
  EXPECT_EQ(m.json()["object"], "list");
}

// ---- deadlines and methods
// ------------------------------------------------------------------------

TEST(HttpDeadlines, HeaderNotCompleteWithinTheDeadlineIs408ThenClose) {
  ServerProcess srv({"--model", golden_model("tiny-r2"), "--header-timeout", "1"});
  ASSERT_TRUE(srv.started()) << srv.log();
  Raw c(srv.port());
  ASSERT_TRUE(c.ok());
  auto t0 = Clock::now();
  ASSERT_TRUE(c.send_raw("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a"));
  HttpResponse r = c.next(20);
  const double secs = since(t0);
  expect_detail(r, 408);
  EXPECT_GE(secs, 0.9) << "answered before the deadline";
  EXPECT_LT(secs, 10.0);
  EXPECT_EQ(lower(r.header("connection")), "close");
  EXPECT_TRUE(c.closed_by_server(10));
  // A complete request on a fresh connection is not affected.
  EXPECT_EQ(http(srv.port(), "GET", "/health").status, 200);
}

TEST(HttpMethods, UnknownMethodIs501AndKnownRouteWithAnotherMethodIs405) {
  int port = shared_port();
  expect_detail(http(port, "BREW", "/health"), 501);
  expect_detail(http(port, "BREW", "/nowhere"), 501);
  HttpResponse put = http(port, "PUT", "/health", "{}", {{"Content-Type", "application/json"}});
  expect_detail(put, 405);
  EXPECT_EQ(put.header("allow"), "GET, HEAD");
  expect_detail(http(port, "GET", "/nowhere"), 404);
}

TEST(HttpMethods, MultipartBodyIs415) {
  HttpResponse r = http(shared_port(), "POST", "/v1/systemone",
                        "--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--x--\r\n",
                        {{"Content-Type", "multipart/form-data; boundary=x"}});
  expect_detail(r, 415);
}

// ---- many slow or idle clients
// ---------------------------------------------------------------------

// 200 connections send a header byte by byte, slowly, never finishing it (well within the 10 s
// header deadline). The old server had a fixed pool of connection threads they all occupied; here
// they cost memory only: /health and a POST from another client answer promptly throughout, and
// every slow connection is still open at the end (not refused, not answered).
TEST(HttpSlowClients, SlowlorisDoesNotLockOutOtherClients) {
  ServerProcess srv({"--model", golden_model("tiny-r2")});
  ASSERT_TRUE(srv.started()) << srv.log();
  const std::string expected = decide(kSmall).output;
  constexpr int kSlow = 200;
  std::vector<std::unique_ptr<Raw>> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<Raw>(srv.port()));
    ASSERT_TRUE(slow.back()->ok()) << i;
  }
  const std::string partial =
      "POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(200, 'a');
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  std::thread dribble([&] {
    for (size_t pos = 0; pos < partial.size() && !stop; ++pos) {
      for (auto& s : slow) s->send_raw(partial.substr(pos, 1));
      ++rounds;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  // Let every slow connection get its first bytes in.
  while (rounds < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // Probe while the slow clients dribble for at least 2 s (20 rounds of one byte each). The probe
  // count is not the bound (a fast machine ends 200 probes before 20 rounds); a wall-clock cap is.
  const auto probe_end = Clock::now() + std::chrono::seconds(8);  // under the 10 s header deadline
  for (int i = 0; i < 5 || (rounds < 20 && Clock::now() < probe_end); ++i) {
    auto t0 = Clock::now();
    HttpResponse h = http(srv.port(), "GET", "/health", "", {}, 10);
    EXPECT_EQ(h.status, 200);
    EXPECT_LT(since(t0), 1.0) << "/health";
    t0 = Clock::now();
    HttpResponse p = post_json(srv.port(), kSmall);
    EXPECT_EQ(p.status, 200);
    EXPECT_EQ(p.body, expected);
    EXPECT_LT(since(t0), 1.0) << "POST";
  }
  stop = true;
  dribble.join();
  EXPECT_GE(rounds.load(), 20);
  int open = 0;
  for (auto& s : slow) open += s->readable(0) ? 0 : 1;
  EXPECT_EQ(open, kSlow) << "slow connections were answered or closed before their deadline";
}

TEST(HttpSlowClients, ConnectionsBeyondTheCapAreRefusedClearly) {
  ServerProcess srv({"--model", golden_model("tiny-r2"), "--max-connections", "4"});
  ASSERT_TRUE(srv.started()) << srv.log();
  std::vector<std::unique_ptr<KeepAliveClient>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<KeepAliveClient>(srv.port()));
    ASSERT_EQ(held.back()->get("/health").status, 200) << i;  // accepted and open
  }
  HttpResponse refused = http(srv.port(), "GET", "/health", "", {}, 10);
  expect_detail(refused, 503);
  EXPECT_EQ(lower(refused.header("connection")), "close");
  EXPECT_FALSE(refused.header("retry-after").empty());
  // The held connections still work; once one closes, a new client is served again.
  EXPECT_EQ(held[0]->get("/health").status, 200);
  held.pop_back();
  auto deadline = Clock::now() + std::chrono::seconds(10);
  int status = 0;
  while (Clock::now() < deadline && (status = http(srv.port(), "GET", "/health").status) != 200)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(status, 200);
}

// ---- CORS
// -------------------------------------------------------------------------------------------

TEST(HttpCors, PreflightAllowedOnlyForConfiguredOrigins) {
  ServerProcess srv({"--model", golden_model("tiny-r2"), "--cors-origin", "https://app.example"});
  ASSERT_TRUE(srv.started()) << srv.log();
  auto preflight = [](int port, const std::string& origin) {
    return http(port, "OPTIONS", "/v1/systemone", "",
                {{"Origin", origin},
                 {"Access-Control-Request-Method", "POST"},
                 {"Access-Control-Request-Headers", "content-type, authorization"}});
  };
  HttpResponse ok = preflight(srv.port(), "https://app.example");
  EXPECT_EQ(ok.status, 204);
  EXPECT_EQ(ok.header("access-control-allow-origin"), "https://app.example");
  EXPECT_NE(ok.header("access-control-allow-methods").find("POST"), std::string::npos);
  EXPECT_NE(lower(ok.header("access-control-allow-headers")).find("content-type"),
            std::string::npos);
  EXPECT_NE(lower(ok.header("access-control-allow-headers")).find("authorization"),
            std::string::npos);
  EXPECT_GT(std::atoi(ok.header("access-control-max-age").c_str()), 0);
  EXPECT_NE(ok.header("vary").find("Origin"), std::string::npos);

  HttpResponse denied = preflight(srv.port(), "https://evil.example");
  EXPECT_EQ(denied.status, 403);
  EXPECT_EQ(denied.header("access-control-allow-origin"), "");

  HttpResponse post = post_json(srv.port(), kSmall, {{"Origin", "https://app.example"}});
  EXPECT_EQ(post.status, 200);
  EXPECT_EQ(post.header("access-control-allow-origin"), "https://app.example");
  EXPECT_NE(post.header("vary").find("Origin"), std::string::npos);
  HttpResponse other = post_json(srv.port(), kSmall, {{"Origin", "https://evil.example"}});
  EXPECT_EQ(other.status, 200);
  EXPECT_EQ(other.header("access-control-allow-origin"), "");

  // CORS is off by default: no origin is allowed.
  HttpResponse off = preflight(shared_port(), "https://app.example");
  EXPECT_EQ(off.status, 403);
  EXPECT_EQ(off.header("access-control-allow-origin"), "");
}

// ---- drain
// ------------------------------------------------------------------------------------------

double metric(KeepAliveClient& client, const std::string& name) {
  HttpResponse r = client.get("/metrics");
  std::smatch m;
  std::regex re("\n" + name + " ([^\n]+)\n");
  if (!std::regex_search(r.body, m, re)) return -1;
  return std::stod(m[1]);
}

// A keep-alive client whose request is in flight when SIGTERM arrives gets its answer, marked
// Connection: close (the server will not read another request from it).
TEST(HttpDrain, AnswersDuringTheDrainSayConnectionClose) {
  ServerProcess srv(
      {"--model", golden_model("tiny-r2"), "--max-length", "16384", "--threads", "1"});
  ASSERT_TRUE(srv.started()) << srv.log();
  const std::string req = request_with_words(3000);
  KeepAliveClient client(srv.port());
  HttpResponse before = client.get("/health");
  ASSERT_EQ(before.status, 200);
  EXPECT_EQ(lower(before.header("connection")), "");  // HTTP/1.1 keep-alive: no close

  KeepAliveClient poller(srv.port());
  HttpResponse in_flight;
  std::thread t([&] { in_flight = client.post("/v1/systemone", req, 60); });
  auto deadline = Clock::now() + std::chrono::seconds(8);  // under the 10 s header deadline
  // The poller's own /metrics request counts as one.
  while (metric(poller, "clef_in_flight_requests") < 2 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  srv.signal(SIGTERM);
  t.join();
  EXPECT_EQ(in_flight.status, 200) << in_flight.body;
  EXPECT_EQ(lower(in_flight.header("connection")), "close");
  EXPECT_EQ(srv.wait_exit(30), 0) << srv.log();
  std::smatch m;
  std::string log = srv.log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(shutdown .*in_flight=(\d+))"))) << log;
  EXPECT_GE(std::stoi(m[1]), 1) << "the signal arrived after the request had finished";
}

}  // namespace
}  // namespace clef::server_test

// The playground (GET / and its files under /ui/) over raw HTTP: 200 with the strict CSP, the
// content types and caching; served without the key when --api-key is set (the API still needs
// it); counted and logged like every route and under the same limits; 404 with --no-ui (and gone
// from /openapi.json). The page in a real browser: tests/browser/playground_test.py.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 with -fsanitize=address reports false -Wmaybe-uninitialized inside std::regex's
// std::function members; the sanitizer build is -Werror too.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <vector>

#include "shared_server.h"

namespace clef::server_test {
namespace {

const char* kCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
    "require-trusted-types-for 'script'; trusted-types 'none'";

// The /ui/ links of the page, in page order (script, style sheet and icon, each with ?v=<hash>).
std::vector<std::string> asset_links(const std::string& page) {
  std::vector<std::string> out;
  static const std::regex link(R"re((?:src|href)="(/ui/[^"]+)")re");
  for (auto it = std::sregex_iterator(page.begin(), page.end(), link); it != std::sregex_iterator();
       ++it)
    out.push_back((*it)[1]);
  return out;
}

// Sends `request` on a fresh connection; everything the server sent until it closed.
std::string raw_exchange(const std::string& request) {
  int fd = connect_loopback(shared_port());
  if (fd < 0) return "";
  std::string out;
  if (send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (int i = 0; i < 1000; ++i) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 10000) <= 0) break;
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

void expect_security_headers(const HttpResponse& r, const std::string& what) {
  EXPECT_EQ(r.header("content-security-policy"), kCsp) << what;
  EXPECT_EQ(r.header("x-content-type-options"), "nosniff") << what;
  EXPECT_EQ(r.header("referrer-policy"), "no-referrer") << what;
  EXPECT_EQ(r.header("x-frame-options"), "DENY") << what;
  EXPECT_FALSE(r.header("x-request-id").empty()) << what;
  EXPECT_TRUE(r.header("server-timing").empty()) << what;
}

TEST(ServerPlayground, PageAndFilesWithCspContentTypesAndCaching) {
  HttpResponse page = http(shared_port(), "GET", "/");
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_EQ(page.header("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(page.header("cache-control"), "no-cache");
  expect_security_headers(page, "/");
  EXPECT_NE(page.body.find("<!doctype html>"), std::string::npos);
  EXPECT_EQ(page.body.find("{{"), std::string::npos) << "an unreplaced placeholder";
  // No inline script, style or handler (the CSP would block them), nothing from another origin.
  EXPECT_FALSE(std::regex_search(page.body, std::regex(R"(<script>|<style|\sstyle=|\son[a-z]+=)")));
  EXPECT_FALSE(std::regex_search(page.body, std::regex(R"((src|href)="(https?:)?//)")));

  const std::vector<std::string> links = asset_links(page.body);
  ASSERT_EQ(links.size(), 3u) << page.body;
  const std::vector<std::pair<std::string, std::string>> types{
      {"/ui/icon.svg", "image/svg+xml"},
      {"/ui/style.css", "text/css; charset=utf-8"},
      {"/ui/app.js", "text/javascript; charset=utf-8"}};
  for (const auto& [path, type] : types) {
    SCOPED_TRACE(path);
    std::string linked;
    for (const auto& l : links)
      if (l.rfind(path + "?v=", 0) == 0) linked = l;
    ASSERT_FALSE(linked.empty()) << "the page does not link " << path;
    EXPECT_TRUE(std::regex_match(linked.substr(path.size()), std::regex(R"(\?v=[0-9a-f]{16})")));
    HttpResponse r = http(shared_port(), "GET", linked);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("content-type"), type);
    EXPECT_EQ(r.header("cache-control"), "public, max-age=31536000, immutable");
    expect_security_headers(r, linked);
    EXPECT_FALSE(r.body.empty());
    // Without (or with a stale) hash: the same bytes, revalidated every time.
    for (const std::string& other : {path, path + "?v=0000000000000000"}) {
      HttpResponse u = http(shared_port(), "GET", other);
      EXPECT_EQ(u.status, 200) << other;
      EXPECT_EQ(u.body, r.body) << other;
      EXPECT_EQ(u.header("cache-control"), "no-cache") << other;
    }
  }
  // HEAD: the headers, no body (read raw until the server closes).
  const std::string head = raw_exchange("HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: " + std::to_string(page.body.size()) + "\r\n"),
            std::string::npos)
      << head;
  EXPECT_NE(head.find(std::string("Content-Security-Policy: ") + kCsp), std::string::npos) << head;
  EXPECT_EQ(head.find("\r\n\r\n"), head.size() - 4) << "HEAD sent a body";
  // Other paths stay 404; other methods 405.
  for (const char* p : {"/ui/", "/ui/nope.js", "/index.html", "//", "/ui/app.js/"})
    EXPECT_EQ(http(shared_port(), "GET", p).status, 404) << p;
  HttpResponse post =
      http(shared_port(), "POST", "/", "{}", {{"Content-Type", "application/json"}});
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.header("allow"), "GET, HEAD");
}

TEST(ServerPlayground, CountedInMetrics) {
  ASSERT_EQ(http(shared_port(), "GET", "/").status, 200);
  ASSERT_EQ(http(shared_port(), "GET", "/ui/app.js").status, 200);
  HttpResponse m = http(shared_port(), "GET", "/metrics");
  EXPECT_NE(m.body.find("clef_http_requests_total{path=\"/\",status=\"200\"}"), std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("clef_http_requests_total{path=\"/ui/*\",status=\"200\"}"),
            std::string::npos)
      << m.body;
}

TEST(ServerPlayground, NoKeyNeededButLimitsAndLoggingApply) {
  ServerProcess srv({"--model", golden_model("tiny-r2"), "--api-key", "k3y", "--max-header-bytes",
                     "2048", "--cors-origin", "https://other.example", "--log-format", "json"});
  ASSERT_TRUE(srv.started()) << srv.log();
  EXPECT_EQ(http(srv.port(), "GET", "/").status, 200);
  EXPECT_EQ(http(srv.port(), "GET", "/ui/style.css").status, 200);
  EXPECT_EQ(http(srv.port(), "GET", "/v1/models").status, 401);  // the API still needs the key
  // A page request from another origin gets no CORS grant; same-origin use needs none.
  HttpResponse cross = http(srv.port(), "GET", "/", "", {{"Origin", "https://evil.example"}});
  EXPECT_EQ(cross.status, 200);
  EXPECT_TRUE(cross.header("access-control-allow-origin").empty());
  // The header limit applies to the playground too.
  HttpResponse big = http(srv.port(), "GET", "/", "", {{"X-Pad", std::string(4096, 'a')}});
  EXPECT_EQ(big.status, 431);
  // And it is logged like any request.
  HttpResponse tagged = http(srv.port(), "GET", "/", "", {{"X-Request-Id", "ui-log-1"}});
  EXPECT_EQ(tagged.status, 200);
  bool logged = false;
  for (int i = 0; i < 50 && !logged; ++i) {
    logged = srv.log().find("\"id\":\"ui-log-1\"") != std::string::npos;
    if (!logged) http(srv.port(), "GET", "/health");
  }
  EXPECT_TRUE(logged) << srv.log();
  EXPECT_TRUE(std::regex_search(srv.log(), std::regex(R"("event":"access".*"path":"/")")))
      << srv.log();
}

TEST(ServerPlayground, NoUiIs404) {
  ServerProcess srv({"--model", golden_model("tiny-r2"), "--no-ui"});
  ASSERT_TRUE(srv.started()) << srv.log();
  for (const char* p : {"/", "/ui/app.js", "/ui/style.css", "/ui/icon.svg"}) {
    HttpResponse r = http(srv.port(), "GET", p);
    EXPECT_EQ(r.status, 404) << p;
    EXPECT_EQ(r.header("content-type"), "application/json") << p;
    EXPECT_TRUE(r.header("content-security-policy").empty()) << p;
  }
  EXPECT_EQ(http(srv.port(), "GET", "/health").status, 200);
  HttpResponse doc = http(srv.port(), "GET", "/openapi.json");
  ASSERT_EQ(doc.status, 200);
  const auto paths = doc.json()["paths"];
  EXPECT_FALSE(paths.contains("/")) << doc.body;
  EXPECT_FALSE(paths.contains("/ui/{asset}")) << doc.body;
  EXPECT_TRUE(paths.contains("/health"));
}

}  // namespace
}  // namespace clef::server_test

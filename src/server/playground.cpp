#include "server/playground.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace clef::server::embedded {
extern const unsigned char playground_index_html[];
extern const size_t playground_index_html_size;
extern const unsigned char playground_app_js[];
extern const size_t playground_app_js_size;
extern const unsigned char playground_style_css[];
extern const size_t playground_style_css_size;
extern const unsigned char playground_icon_svg[];
extern const size_t playground_icon_svg_size;
}  // namespace clef::server::embedded

namespace clef::server::detail {

const char* const kPlaygroundCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
    "require-trusted-types-for 'script'; trusted-types 'none'";

namespace {

struct Asset {
  std::string path;  // "/" or "/ui/<name>"
  std::string content_type;
  std::string body;
  std::string hash;  // 16 hex digits of FNV-1a 64 over body (the `?v=` of the page's links)
};

std::string bytes(const unsigned char* p, size_t n) {
  return std::string(reinterpret_cast<const char*>(p), n);
}

std::string fnv1a_hex(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// Built once: the assets, then the page with `{{hash:<name>}}` replaced by each asset's hash.
const std::vector<Asset>& assets() {
  static const std::vector<Asset> all = [] {
    namespace e = clef::server::embedded;
    std::vector<Asset> v;
    v.push_back({"/ui/app.js", "text/javascript; charset=utf-8",
                 bytes(e::playground_app_js, e::playground_app_js_size), ""});
    v.push_back({"/ui/style.css", "text/css; charset=utf-8",
                 bytes(e::playground_style_css, e::playground_style_css_size), ""});
    v.push_back({"/ui/icon.svg", "image/svg+xml",
                 bytes(e::playground_icon_svg, e::playground_icon_svg_size), ""});
    std::string page = bytes(e::playground_index_html, e::playground_index_html_size);
    for (auto& a : v) {
      a.hash = fnv1a_hex(a.body);
      replace_all(page, "{{hash:" + a.path.substr(4) + "}}", a.hash);
    }
    v.push_back({"/", "text/html; charset=utf-8", page, fnv1a_hex(page)});
    return v;
  }();
  return all;
}

const Asset* find(std::string_view path) {
  for (const auto& a : assets())
    if (a.path == path) return &a;
  return nullptr;
}

}  // namespace

bool is_ui_path(std::string_view path) {
  return path == "/" || path == "/ui/app.js" || path == "/ui/style.css" || path == "/ui/icon.svg";
}

Reply playground_reply(std::string_view target) {
  const size_t q = target.find('?');
  const Asset* a = find(target.substr(0, q));
  if (!a) return detail_reply(404, "Not Found");
  const std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  const bool versioned = a->path != "/" && query == "v=" + a->hash;
  Reply r;
  r.body = a->body;
  r.content_type = a->content_type;
  r.headers.emplace_back("Content-Security-Policy", kPlaygroundCsp);
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  r.headers.emplace_back("Cross-Origin-Opener-Policy", "same-origin");
  r.headers.emplace_back("Cross-Origin-Resource-Policy", "same-origin");
  r.headers.emplace_back("Cache-Control",
                         versioned ? "public, max-age=31536000, immutable" : "no-cache");
  return r;
}

}  // namespace clef::server::detail

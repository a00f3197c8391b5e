// Boost.Asio + Beast for the HTTP server's translation units, always with the same configuration
// (beast::string_view = std::string_view): include this header, never Beast directly.
#pragma once

#define BOOST_BEAST_USE_STD_STRING_VIEW 1

#include <chrono>

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports a false -Wmaybe-uninitialized inside Beast's parser (a boost::optional returned
// as none) where it is inlined, e.g. in the sanitizer build; the warning's location is in Beast's
// headers, so this covers exactly them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <nlohmann/json.hpp>

namespace clef::server::detail {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

}  // namespace clef::server::detail

// Boost.Asio + Beast for the HTTP server's translation units, always with the same configuration
// (beast::string_view = std::string_view): include this header, never Beast directly.
#pragma once

#define BOOST_BEAST_USE_STD_STRING_VIEW 1

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>

#include <nlohmann/json.hpp>

namespace clef::server::detail {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

}  // namespace clef::server::detail

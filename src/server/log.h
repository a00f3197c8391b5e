// Structured log lines for the server (start-up, errors, access log): one line per event, either
// `key=value` text or a JSON object, so operators can grep or ship them. Thread-safe.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace clef::server {

enum class LogFormat { Text, Json };

class Log {
 public:
  explicit Log(LogFormat format = LogFormat::Text, std::FILE* out = stderr)
      : format_(format), out_(out) {}

  // fields: a JSON object; its members become key=value pairs (text) or JSON members.
  void write(std::string_view level, std::string_view event,
             const nlohmann::ordered_json& fields = {});
  void info(std::string_view event, const nlohmann::ordered_json& fields = {}) {
    write("info", event, fields);
  }
  void warn(std::string_view event, const nlohmann::ordered_json& fields = {}) {
    write("warn", event, fields);
  }
  void error(std::string_view event, const nlohmann::ordered_json& fields = {}) {
    write("error", event, fields);
  }

  LogFormat format() const { return format_; }

 private:
  LogFormat format_;
  std::FILE* out_;
  std::mutex mutex_;
};

// UTC wall-clock time with milliseconds, RFC 3339 ("2026-11-29T20:01:02.345Z").
std::string utc_timestamp();

}  // namespace clef::server

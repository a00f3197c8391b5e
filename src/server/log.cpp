#include "server/log.h"

#include <chrono>
#include <ctime>

namespace clef::server {

std::string utc_timestamp() {
  using namespace std::chrono;
  auto now = system_clock::now();
  auto secs = system_clock::to_time_t(now);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

namespace {

// Text values are quoted (JSON string escaping) when they hold anything a `key=value` reader would
// split on, so a client-chosen request id cannot forge extra fields or lines.
std::string text_value(const nlohmann::ordered_json& v) {
  if (!v.is_string()) return v.dump();
  const std::string& s = v.get_ref<const std::string&>();
  bool plain = !s.empty();
  for (unsigned char c : s) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c >= 0x7f) {
      plain = false;
      break;
    }
  }
  return plain ? s : v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

void Log::write(std::string_view level, std::string_view event,
                const nlohmann::ordered_json& fields) {
  std::string line;
  if (format_ == LogFormat::Json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    j["time"] = utc_timestamp();
    j["level"] = level;
    j["event"] = event;
    if (fields.is_object()) {
      for (const auto& [k, v] : fields.items()) j[k] = v;
    }
    line = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  } else {
    line = utc_timestamp();
    line += ' ';
    line += level;
    line += ' ';
    line += event;
    if (fields.is_object()) {
      for (const auto& [k, v] : fields.items()) {
        line += ' ';
        line += k;
        line += '=';
        line += text_value(v);
      }
    }
  }
  line += '\n';
  std::lock_guard<std::mutex> lock(mutex_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace clef::server

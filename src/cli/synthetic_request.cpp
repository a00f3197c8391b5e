#include "cli/synthetic_request.h"

#include <algorithm>

namespace clef::cli {

// A one-question request whose state is `words` filler words (varied, mostly one token each).
json::Value make_request(const std::string& model, int words) {
  static const char* kWords[] = {"the",    "river",  "market", "signal", "garden", "winter",
                                 "policy", "engine", "quiet",  "yellow", "number", "forest",
                                 "travel", "window", "simple", "report"};
  std::string state;
  state.reserve(static_cast<size_t>(words) * 7);
  for (int i = 0; i < words; ++i) {
    if (i) state += ' ';
    state += kWords[(i * 7 + i / 16) % 16];
  }
  auto opt = [](const char* d) { return json::Value::string(d); };
  json::Value criteria = json::Value::object({{"approve", opt("the request is fine")},
                                              {"reject", opt("the request is not fine")},
                                              {"escalate", opt("unsure")}});
  json::Value q = json::Value::object(
      {{"type", json::Value::string("choice")},
       {"instructions", json::Value::string("Decide what to do with this report.")},
       {"criteria", criteria}});
  return json::Value::object({{"model", json::Value::string(model)},
                              {"state", json::Value::string(state)},
                              {"questions", json::Value::object({{"decision", q}})},
                              {"truncation", json::Value::string("allow")}});
}

// Finds a request of exactly `tokens` input tokens (the state cut to fit by truncation "allow").
json::Value request_of_length(const service::Decider& d, const std::string& model, int tokens) {
  int words = tokens;
  for (int iter = 0; iter < 12; ++iter) {
    const int n = static_cast<int>(d.prepare(make_request(model, words)).encoded.input_ids.size());
    if (n >= tokens) break;
    words += std::max(8, (tokens - n) + (tokens - n) / 8);
  }
  return make_request(model, words);
}

}  // namespace clef::cli

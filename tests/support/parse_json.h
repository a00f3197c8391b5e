// A test's JSON text (a literal, a fixture line, a command's output) as a json::Value, and a
// JSON-lines fixture as its values; malformed text throws with the parser's message and the text's
// start, so the failing case names itself.
#pragma once

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "json/value.h"

namespace clef::testing {

inline json::Value parse_or_die(const std::string& text) {
  json::ParseError err;
  auto v = json::parse(text, &err);
  if (!v) throw std::runtime_error(err.message + ": " + text.substr(0, 400));
  return *v;
}

// Every non-empty line of a JSON-lines file; a file that cannot be opened throws.
inline std::vector<json::Value> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<json::Value> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(parse_or_die(line));
  return out;
}

}  // namespace clef::testing

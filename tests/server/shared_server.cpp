#include "shared_server.h"

#include <gtest/gtest.h>

#include <memory>

namespace clef::server_test {

ServerProcess& shared_server() {
  static std::unique_ptr<ServerProcess> srv = std::make_unique<ServerProcess>(
      std::vector<std::string>{"--model", golden_model("tiny-r2"), "--max-length",
                               std::to_string(kSharedMaxLength), "--max-queue", "256"});
  return *srv;
}

int shared_port() {
  ServerProcess& s = shared_server();
  EXPECT_TRUE(s.started()) << s.log();
  return s.port();
}

DecideResult decide(const std::string& request, const std::vector<std::string>& extra) {
  std::vector<std::string> argv{CLEF_BINARY,    "decide",
                                "--model",      golden_model("tiny-r2"),
                                "--max-length", std::to_string(kSharedMaxLength)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  DecideResult r;
  r.status = run_program(argv, request, &r.output);
  while (!r.output.empty() && (r.output.back() == '\n' || r.output.back() == '\r'))
    r.output.pop_back();
  return r;
}

const std::vector<DecideResult>& golden_decisions() {
  static const std::vector<DecideResult> results = [] {
    std::vector<DecideResult> out;
    for (const auto& req : golden_requests("tiny-r2")) out.push_back(decide(req));
    return out;
  }();
  return results;
}

}  // namespace clef::server_test

// One `clefserve serve --model tiny-r2 --max-length 1024` for the tests that do not need their own
// flags, started on first use, plus `clefserve decide` answers for the golden requests.
#pragma once

#include <string>
#include <vector>

#include "server_process.h"

namespace clef::server_test {

inline constexpr int kSharedMaxLength = 1024;

ServerProcess& shared_server();
// The shared server's port; a failed start is reported (with its log) as a test failure.
int shared_port();

struct DecideResult {
  int status = -1;     // decide's exit status (0 answered, 2 refused)
  std::string output;  // stdout without the trailing newline
};
// `clefserve decide --model tiny-r2 --max-length 1024 [extra]` on `request`.
DecideResult decide(const std::string& request, const std::vector<std::string>& extra = {});
// decide() of every golden tiny-r2 request, computed once.
const std::vector<DecideResult>& golden_decisions();

}  // namespace clef::server_test

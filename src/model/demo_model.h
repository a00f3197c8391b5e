// The built-in demo model for `clefserve serve` without --model: a tiny release with random
// weights, generated once (fixed seed) into a cache folder so a fresh machine can see the whole
// service work. Its answers are meaningless; /health reports "demo": true.
#pragma once

#include <functional>
#include <string>

namespace clef::model {

inline constexpr const char* kDemoModelName = "clef-demo";

// $XDG_CACHE_HOME/clefserve/demo-<version>, else $HOME/.cache/clefserve/demo-<version>.
std::string demo_model_dir(const std::string& version);

// Returns the demo release folder, generating it first when absent (atomically: written to a
// temporary sibling `<dir>.partial-<pid>`, then renamed). Staging folders left by an earlier,
// killed start (their process is gone) are removed first. Throws std::runtime_error with the
// reason.
std::string ensure_demo_model(const std::string& version,
                              const std::function<void(const std::string&)>& progress);

}  // namespace clef::model

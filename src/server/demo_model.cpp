#include "server/demo_model.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace clef::server {

std::string demo_model_dir(const std::string& version) {
  namespace fs = std::filesystem;
  fs::path base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    base = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    base = fs::path(home) / ".cache";
  } else {
    throw std::runtime_error(
        "no cache folder for the demo model: set XDG_CACHE_HOME or HOME, or pass --model");
  }
  return (base / "clefserve" / ("demo-" + version)).string();
}

std::string ensure_demo_model(const std::string& version,
                              const std::function<void(const std::string&)>& progress) {
  std::string dir = demo_model_dir(version);
  if (std::filesystem::exists(std::filesystem::path(dir) / "config.json")) return dir;
  (void)progress;
  throw std::runtime_error(
      "the demo model cannot be generated yet (make-model is not built); pass --model DIR");
}

}  // namespace clef::server

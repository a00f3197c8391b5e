#include "server/demo_model.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "model/make_model.h"

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
  namespace fs = std::filesystem;
  std::string dir = demo_model_dir(version);
  auto ready = [&] { return fs::exists(fs::path(dir) / "config.json"); };
  if (ready()) return dir;
  if (progress) progress("generating the demo model (tiny preset, seed 0) into " + dir);
  std::error_code ec;
  fs::create_directories(fs::path(dir).parent_path(), ec);
  if (ec)
    throw std::runtime_error("cannot create " + fs::path(dir).parent_path().string() + ": " +
                             ec.message());
  model::MakeModelOptions mo;
  mo.preset = "tiny";
  mo.seed = 0;
  mo.out_dir = dir;
  mo.progress = progress;
  try {
    model::make_model(mo);  // writes <dir>.partial, renamed when complete
  } catch (const std::exception& e) {
    if (ready()) return dir;  // another server generated it at the same time
    throw std::runtime_error(std::string("cannot generate the demo model: ") + e.what());
  }
  return dir;
}

}  // namespace clef::server

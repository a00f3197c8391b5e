#include "model/demo_model.h"

#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "model/make_model.h"

namespace clef::model {

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

namespace {

// make_model stages the release in `<dir>.partial-<pid>` and renames it when complete. A server
// killed while generating leaves its staging folder behind: remove those whose process is gone
// (a live one may belong to a server generating right now).
void remove_stale_partials(const std::filesystem::path& dir,
                           const std::function<void(const std::string&)>& progress) {
  namespace fs = std::filesystem;
  const std::string prefix = dir.filename().string() + ".partial-";
  std::error_code ec;
  fs::directory_iterator it(dir.parent_path(), ec), end;
  if (ec) return;  // no cache folder yet
  std::vector<fs::path> stale;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string suffix = name.substr(prefix.size());
    char* rest = nullptr;
    errno = 0;
    const long long pid = std::strtoll(suffix.c_str(), &rest, 10);
    const bool numeric = !suffix.empty() && rest && *rest == '\0' && errno == 0;
    const bool alive = numeric && pid > 0 && pid <= std::numeric_limits<pid_t>::max() &&
                       (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
    if (!alive) stale.push_back(it->path());
  }
  for (const auto& p : stale) {
    fs::remove_all(p, ec);
    if (progress)
      progress(std::string(ec ? "cannot remove" : "removed") + " the stale demo staging folder " +
               p.string() + " (left by an interrupted start)");
  }
}

}  // namespace

std::string ensure_demo_model(const std::string& version,
                              const std::function<void(const std::string&)>& progress) {
  namespace fs = std::filesystem;
  std::string dir = demo_model_dir(version);
  remove_stale_partials(dir, progress);
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

}  // namespace clef::model

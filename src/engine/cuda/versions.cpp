#include "engine/cuda/versions.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cctype>
#include <fstream>
#include <sstream>

namespace clef::engine::cuda {
namespace {
std::string major_minor(int v) {  // CUDA's 1000 * major + 10 * minor
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// The driver's own library (libnvidia-ml, installed with every NVIDIA driver, also in containers
// that lack /proc/driver/nvidia), opened at run time so the build needs neither it nor its header.
// The three entry points are NVML's stable C ABI (0 = NVML_SUCCESS).
std::string nvml_driver_version() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return {};
  using Init = int (*)();
  using Version = int (*)(char*, unsigned);
  auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
  auto version = reinterpret_cast<Version>(dlsym(lib, "nvmlSystemGetDriverVersion"));
  auto shutdown = reinterpret_cast<Init>(dlsym(lib, "nvmlShutdown"));
  std::string out;
  if (init && version && shutdown && init() == 0) {
    char buf[96] = {};
    if (version(buf, sizeof buf) == 0) out = buf;
    shutdown();
  }
  dlclose(lib);
  return out;
}
}  // namespace

std::string parse_nvidia_driver_version(const std::string& text) {
  const std::string marker = "Kernel Module";
  auto at = text.find(marker);
  if (at == std::string::npos) return {};
  at += marker.size();
  while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
  size_t end = at;
  while (end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.'))
    ++end;
  return end > at ? text.substr(at, end - at) : std::string();
}

std::map<std::string, std::string> cuda_versions() {
  std::map<std::string, std::string> v;
  std::string driver;
  if (std::ifstream in("/proc/driver/nvidia/version"); in) {
    std::stringstream ss;
    ss << in.rdbuf();
    driver = parse_nvidia_driver_version(ss.str());
  }
  if (driver.empty()) driver = nvml_driver_version();
  v["driver_version"] = driver.empty() ? "unknown" : driver;
  int d = 0, r = 0;
  v["cuda_driver_api"] = cudaDriverGetVersion(&d) == cudaSuccess ? major_minor(d) : "unknown";
  v["cuda_runtime"] = cudaRuntimeGetVersion(&r) == cudaSuccess ? major_minor(r) : "unknown";
  const size_t lt = cublasLtGetVersion();  // 10000 * major + 100 * minor + patch
  v["cublaslt"] = std::to_string(lt / 10000) + "." + std::to_string((lt / 100) % 100) + "." +
                  std::to_string(lt % 100);
  return v;
}

}  // namespace clef::engine::cuda

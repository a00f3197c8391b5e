#include "engine/cuda/versions.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cctype>
#include <fstream>
#include <sstream>

namespace clef::engine::cuda {
namespace {
std::string major_minor(int v) {  // CUDA's 1000 * major + 10 * minor
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
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

#include "engine/device_spec.h"

#include <algorithm>
#include <stdexcept>

#ifdef CLEF_HAVE_CUDA
#include "engine/cuda/cuda_engine.h"
#endif

namespace clef::engine {

namespace {

constexpr std::string_view kCudaPrefix = "cuda:";
constexpr size_t kMaxIndexDigits = 6;  // far above any host's GPU count, far below int overflow

[[noreturn]] void bad(std::string_view text, const std::string& why) {
  throw std::invalid_argument("--device '" + std::string(text) + "': " + why + " (expected " +
                              kDeviceSpecForms + ")");
}

}  // namespace

DeviceSpec parse_device_spec(std::string_view text) {
  DeviceSpec s;
  if (text == "cpu") return s;
  if (text.substr(0, 4) == "cpu:" || text.substr(0, 4) == "cpu,")
    bad(text, "cpu is one device, it takes no index or list");
  s.device = Device::Cuda;
  if (text == "cuda") return s;
  if (text.substr(0, kCudaPrefix.size()) != kCudaPrefix) bad(text, "unknown device");
  if (text == "cuda:all") {
    s.all = true;
    s.indices.clear();
    return s;
  }
  // A comma-separated list; every entry but the first may leave out its "cuda:".
  s.indices.clear();
  size_t at = 0;
  for (;;) {
    const size_t comma = text.find(',', at);
    std::string_view item =
        text.substr(at, comma == std::string_view::npos ? text.npos : comma - at);
    if (item.substr(0, kCudaPrefix.size()) == kCudaPrefix) {
      item.remove_prefix(kCudaPrefix.size());
    } else if (at == 0) {
      bad(text, "unknown device");
    }
    if (item.empty()) bad(text, "an empty device index");
    if (item == "all") bad(text, "cuda:all cannot be combined with a list");
    if (item.size() > kMaxIndexDigits ||
        !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
      bad(text, "'" + std::string(item) + "' is not a device index");
    const int index = std::stoi(std::string(item));
    if (std::find(s.indices.begin(), s.indices.end(), index) != s.indices.end())
      bad(text, device_label(Device::Cuda, index) + " is listed twice");
    s.indices.push_back(index);
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return s;
}

std::vector<int> resolve_devices(const DeviceSpec& spec, int device_count) {
  if (spec.device != Device::Cuda) return spec.indices;
  if (device_count <= 0) return spec.all ? std::vector<int>{0} : spec.indices;
  if (spec.all) {
    std::vector<int> every(static_cast<size_t>(device_count));
    for (int i = 0; i < device_count; ++i) every[static_cast<size_t>(i)] = i;
    return every;
  }
  for (int i : spec.indices)
    if (i >= device_count)
      throw std::invalid_argument(
          "--device " + device_label(Device::Cuda, i) + ": this machine has " +
          std::to_string(device_count) + " CUDA device" + (device_count == 1 ? "" : "s") +
          " (cuda:0" + (device_count > 1 ? "..cuda:" + std::to_string(device_count - 1) : "") +
          ")");
  return spec.indices;
}

std::string device_label(Device device, int index) {
  return device == Device::Cpu ? "cpu" : "cuda:" + std::to_string(index);
}

int cuda_device_count() {
#ifdef CLEF_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

}  // namespace clef::engine

// `--device` values: cpu | cuda | cuda:N | cuda:N,M,... (or cuda:N,cuda:M,...) | cuda:all, parsed
// into a backend and the device indices to run one engine on each.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace clef::engine {

struct DeviceSpec {
  Device device = Device::Cpu;
  std::vector<int> indices{0};  // in the order given; cpu and cuda: {0}
  bool all = false;             // cuda:all: every device the machine has (resolve_devices)
};

// The grammar of --device, for messages and --help.
inline constexpr const char* kDeviceSpecForms = "cpu, cuda, cuda:N, cuda:N,M,... or cuda:all";

// Throws std::invalid_argument with one line naming the bad part: a malformed spec, an index
// listed twice.
DeviceSpec parse_device_spec(std::string_view text);

// The devices to start an engine on: the listed indices, or 0..device_count-1 for cuda:all.
// device_count <= 0 (no usable device, or a build without CUDA) checks nothing here, so that engine
// creation fails with its own message (cuda:all then means cuda:0). Throws std::invalid_argument
// for an index the machine does not have.
std::vector<int> resolve_devices(const DeviceSpec& spec, int device_count);

// "cpu" or "cuda:N": a device's name in /health, /metrics labels and messages.
std::string device_label(Device device, int index);

// CUDA devices this process can use; 0 without any (or in a build without the CUDA backend).
int cuda_device_count();

}  // namespace clef::engine

// The current device's limits that kernel picks and launch checks read (shared memory opt-in,
// compute capability, multiprocessors). They are properties of the hardware, fixed for the
// process, so each is queried once per device and attribute: dispatchers ask on every eager
// launch and graph capture.
#pragma once

namespace clef::engine::cuda {

enum class DeviceAttr { SmemOptin = 0, CcMajor = 1, CcMinor = 2, SmCount = 3 };

// The attribute of the current device; throws std::runtime_error when it cannot be queried.
int device_attribute(DeviceAttr which);

}  // namespace clef::engine::cuda

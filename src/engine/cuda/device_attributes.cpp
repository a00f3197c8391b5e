#include "engine/cuda/device_attributes.h"

#include <cuda_runtime.h>

#include <functional>
#include <mutex>

#include "engine/cuda/cuda_check.h"

namespace clef::engine::cuda {

// One query per device and attribute, each behind its own once_flag (call_once makes the store
// visible to every later reader; a query that throws leaves the flag unset, so the next call
// retries). Devices past kMaxDevices query every time.
int device_attribute(DeviceAttr which) {
  constexpr int kMaxDevices = 64, kAttrs = 4;
  static std::once_flag once[kMaxDevices][kAttrs];
  static int value[kMaxDevices][kAttrs];
  const cudaDeviceAttr attrs[kAttrs] = {
      cudaDevAttrMaxSharedMemoryPerBlockOptin, cudaDevAttrComputeCapabilityMajor,
      cudaDevAttrComputeCapabilityMinor, cudaDevAttrMultiProcessorCount};
  const int i = static_cast<int>(which);
  int dev = 0;
  CLEF_CUDA_CHECK(cudaGetDevice(&dev));
  auto query = [dev, attr = attrs[i]](int& out) {
    CLEF_CUDA_CHECK(cudaDeviceGetAttribute(&out, attr, dev));
  };
  if (dev < 0 || dev >= kMaxDevices) {
    int v = 0;
    query(v);
    return v;
  }
  std::call_once(once[dev][i], query, std::ref(value[dev][i]));
  return value[dev][i];
}

}  // namespace clef::engine::cuda

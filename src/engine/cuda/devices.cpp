#include <cuda_runtime.h>

#include "engine/cuda/cuda_engine.h"

namespace clef::engine::cuda {

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace clef::engine::cuda

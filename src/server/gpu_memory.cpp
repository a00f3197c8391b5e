#include "server/gpu_memory.h"

#ifdef CLEF_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace clef::server {

int64_t cuda_memory_used_bytes() {
#ifdef CLEF_HAVE_CUDA
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
  return static_cast<int64_t>(total_b - free_b);
#else
  return -1;
#endif
}

}  // namespace clef::server

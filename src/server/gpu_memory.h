// GPU memory in use on the current device, for /metrics. The server layer asks the CUDA runtime
// directly (when the CUDA backend is built) so the engine interface needs no extra method.
#pragma once

#include <cstdint>

namespace clef::server {

// Bytes in use on the current CUDA device (total - free), or -1 without CUDA / on error.
int64_t cuda_memory_used_bytes();

}  // namespace clef::server

// Error checking and owning device / pinned host allocations for the CUDA backend: every
// CUDA/cuBLASLt call is checked and a failure becomes one std::runtime_error line naming the call
// (never an abort).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace clef::engine::cuda {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error in ") + what + " (" + file + ":" +
                           std::to_string(line) + "): " + cudaGetErrorString(e));
}
[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* what, const char* file,
                                      int line) {
  throw std::runtime_error(std::string("cuBLASLt error in ") + what + " (" + file + ":" +
                           std::to_string(line) + "): status " +
                           std::to_string(static_cast<int>(s)));
}

#define CLEF_CUDA_CHECK(call)                                               \
  do {                                                                      \
    cudaError_t clef_e_ = (call);                                           \
    if (clef_e_ != cudaSuccess)                                             \
      ::clef::engine::cuda::throw_cuda(clef_e_, #call, __FILE__, __LINE__); \
  } while (0)
#define CLEF_CUBLAS_CHECK(call)                                               \
  do {                                                                        \
    cublasStatus_t clef_s_ = (call);                                          \
    if (clef_s_ != CUBLAS_STATUS_SUCCESS)                                     \
      ::clef::engine::cuda::throw_cublas(clef_s_, #call, __FILE__, __LINE__); \
  } while (0)
// After a kernel launch: launch-configuration errors surface here.
#define CLEF_CUDA_LAUNCH_CHECK() CLEF_CUDA_CHECK(cudaGetLastError())

// Owning bytes from one CUDA allocator (Memory::alloc / Memory::free), grown on demand. Move-only.
template <typename Memory>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  explicit CudaBuffer(size_t bytes) { resize(bytes); }
  ~CudaBuffer() { release(); }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  CudaBuffer(CudaBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  // Reallocates (contents lost) when `bytes` exceeds the current size.
  void resize(size_t bytes) {
    if (bytes <= bytes_) return;
    release();
    ptr_ = Memory::alloc(bytes);
    bytes_ = bytes;
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void release() noexcept {
    if (ptr_) Memory::free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct DeviceMemory {
  static void* alloc(size_t bytes) {
    void* p = nullptr;
    CLEF_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  static void free(void* p) noexcept { cudaFree(p); }
};
// Page-locked host memory. A cudaMemcpyAsync from pageable memory may wait for the stream to
// drain; from pinned memory it is queued, so the host can keep enqueueing while the GPU still runs
// earlier work.
struct PinnedMemory {
  static void* alloc(size_t bytes) {
    void* p = nullptr;
    CLEF_CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
  }
  static void free(void* p) noexcept { cudaFreeHost(p); }
};

using DeviceBuffer = CudaBuffer<DeviceMemory>;
using PinnedBuffer = CudaBuffer<PinnedMemory>;

}  // namespace clef::engine::cuda

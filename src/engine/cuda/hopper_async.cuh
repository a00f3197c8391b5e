// sm_90a asynchronous-pipeline helpers shared by the Hopper kernels (attention/flash_wgmma.cu,
// gemm/swiglu_gemm.cu): warpgroup-MMA fences and waits, and the mbarriers that count bulk / TMA
// copies. Defined only where wgmma_ops.cuh finds sm_90a features (CLEF_WGMMA_AVAILABLE); other
// targets build those kernels as traps.
#pragma once

#include <cstdint>

#include "engine/cuda/attention/wgmma_ops.cuh"
#include "engine/cuda/mma_sync.cuh"

namespace clef::engine::cuda::hopper {

#ifdef CLEF_WGMMA_AVAILABLE
// A shared-memory matrix descriptor with no swizzle: start address, the byte stride between core
// matrices along K (lbo) and along M/N (sbo), all in 16-byte units.
__device__ __forceinline__ uint64_t smem_desc(const void* p, uint32_t lbo, uint32_t sbo) {
  const uint32_t a = smem_addr(p);
  return static_cast<uint64_t>((a & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32);
}
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>  // at most N of this warpgroup's committed groups still running
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins accumulator registers after a wait (the asm that wrote them did so asynchronously: without
// this the compiler may read them before the wait).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// mbarriers: one thread announces a stage's bytes (expect_tx) and issues its copies; the waiters
// wait for the phase the copies complete (a fresh barrier: parity 1 passes at once).
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@p bra.uni DONE;\n"
      "bra.uni WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
#endif  // CLEF_WGMMA_AVAILABLE

}  // namespace clef::engine::cuda::hopper

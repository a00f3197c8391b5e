// Shared by the kernel workbench programs (dev/cuda/<family>.cu, llm.c dev/cuda style): random
// inputs, device buffers in the storage type, a check against the clef_engine_ref reference, event
// timing and the roofline table. Not a test framework: a program prints, and exits 1 when a check
// fails (before timing anything), 2 on a CUDA error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "support/ref/backbone_ref.h"
#include "support/ref/random_inputs.h"

namespace clef::dev {

#define DEV_CUDA_CHECK(call)                                                            \
  do {                                                                                  \
    cudaError_t dev_e_ = (call);                                                        \
    if (dev_e_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "CUDA error in %s (%s:%d): %s\n", #call, __FILE__, __LINE__, \
                   cudaGetErrorString(dev_e_));                                         \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

// ---- H200 peaks (SXM, dense, boost clock): what each timed row is compared to ----------------
struct Peak {
  const char* name;
  double per_s;  // bytes/s or FLOP/s
  bool flops;
};
constexpr Peak kHbm{"HBM 4.8 TB/s", 4.8e12, false};
constexpr Peak kBf16Tensor{"bf16 tensor 989 TFLOP/s", 989e12, true};
// the dense bf16 rate of mma.sync m16n8k16 (the GDN and backbone attention kernels' instruction)
constexpr Peak kMmaSync{"bf16 mma.sync 660 TFLOP/s", 660e12, true};
constexpr Peak kFp32Simt{"fp32 SIMT 67 TFLOP/s", 67e12, true};

// ---- shapes ------------------------------------------------------------------------------------
// Clef-flash: hidden 4096, intermediate 12288; GDN 16 key / 32 value heads x 128, conv 4;
// attention 16 q / 4 kv heads x 256, rotary 64 dims.
constexpr int kHidden = 4096, kInter = 12288;
constexpr int kGdnHk = 16, kGdnHv = 32, kGdnD = 128, kConvK = 4;
constexpr int kAttnNh = 16, kAttnNkv = 4, kAttnHd = 256, kRotary = 64;
constexpr double kRopeTheta = 1e7;
constexpr float kEps = 1e-6f;
// Fused projection widths of the two layer kinds: linear [qkv | z | b | a], full [q/gate | k | v].
constexpr int kGdnCqkv = 2 * kGdnHk * kGdnD + kGdnHv * kGdnD;
constexpr int kGdnLd = kGdnCqkv + kGdnHv * kGdnD + 2 * kGdnHv;
constexpr int kAttnLd = kAttnNh * 2 * kAttnHd + 2 * kAttnNkv * kAttnHd;

// The profile's token counts; CLEF_BENCH_T=<T> times one length only (e.g. under a profiler).
inline std::vector<int> bench_tokens() {
  if (const char* t = std::getenv("CLEF_BENCH_T")) return {std::atoi(t)};
  return {361, 961, 2761, 5661};
}
// CLEF_BENCH_SKIP_CHECK=1: time only (a profiler run counting launches).
inline bool skip_check() {
  const char* s = std::getenv("CLEF_BENCH_SKIP_CHECK");
  return s && *s && std::strcmp(s, "0") != 0;
}

// ---- random inputs -----------------------------------------------------------------------------
// Seed from CLEF_SEED, else fresh; printed so that a failing check can be replayed.
// Runs `checks` (every variant against its reference) unless CLEF_BENCH_SKIP_CHECK is set; false,
// after saying that nothing will be timed, when any of them failed.
template <typename F>
bool checks_pass(const char* family, F&& checks) {
  if (skip_check() || checks()) return true;
  std::printf("%s: MISMATCH, nothing timed\n", family);
  return false;
}

inline std::mt19937_64 make_rng() {
  uint64_t seed;
  if (const char* s = std::getenv("CLEF_SEED")) {
    seed = std::strtoull(s, nullptr, 10);
  } else {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  std::printf("seed %llu (CLEF_SEED=<n> replays)\n", static_cast<unsigned long long>(seed));
  return std::mt19937_64(seed);
}
using engine::ref::randn;
using engine::ref::randu;
using engine::ref::round_all_bf16;
// Random values exactly representable in E (so the reference sees the kernel's inputs).
template <typename E>
std::vector<float> rand_e(std::mt19937_64& rng, size_t n, float scale = 1.0f, float mean = 0.0f) {
  auto v = randn(rng, n, scale, mean);
  if (std::is_same_v<E, __nv_bfloat16>) round_all_bf16(v);
  return v;
}
// ---- device buffers
// ------------------------------------------------------------------------------ Owning device
// bytes; move-only.
class Buf {
 public:
  Buf() = default;
  explicit Buf(size_t bytes) : bytes_(std::max<size_t>(bytes, 16)) {
    DEV_CUDA_CHECK(cudaMalloc(&p_, bytes_));
  }
  ~Buf() {
    if (p_) cudaFree(p_);
  }
  Buf(Buf&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr, o.bytes_ = 0; }
  Buf& operator=(Buf&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Host floats (bf16-exact for bf16) -> device elements of E.
template <typename E>
Buf to_device(const std::vector<float>& v) {
  Buf b(v.size() * sizeof(E));
  if constexpr (std::is_same_v<E, float>) {
    DEV_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  } else {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t u;
      const float r = engine::ref::round_bf16(v[i]);
      std::memcpy(&u, &r, 4);
      h[i] = static_cast<uint16_t>(u >> 16);
    }
    DEV_CUDA_CHECK(cudaMemcpy(b.get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  }
  return b;
}
// n elements of E filled with NaN (0xFF bytes are NaN in both types): unwritten outputs show.
template <typename E>
Buf poisoned(size_t n) {
  Buf b(n * sizeof(E));
  DEV_CUDA_CHECK(cudaMemset(b.get(), 0xFF, n * sizeof(E)));
  return b;
}
template <typename E>
std::vector<float> to_host(const Buf& b, size_t n, size_t offset = 0) {
  DEV_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out(n);
  if constexpr (std::is_same_v<E, float>) {
    DEV_CUDA_CHECK(cudaMemcpy(out.data(), b.get<float>() + offset, n * 4, cudaMemcpyDeviceToHost));
  } else {
    std::vector<uint16_t> h(n);
    DEV_CUDA_CHECK(cudaMemcpy(h.data(), b.get<uint16_t>() + offset, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) {
      const uint32_t u = static_cast<uint32_t>(h[i]) << 16;
      std::memcpy(&out[i], &u, 4);
    }
  }
  return out;
}

// ---- check -------------------------------------------------------------------------------------
// got vs ref: every element finite and the relative L2 error within tol; prints one line either
// way (max |error| too) and returns whether it passed.
inline bool check(const std::string& variant, const char* what, const std::vector<float>& got,
                  const std::vector<float>& ref, double tol) {
  double num = 0, den = 0, max_abs = 0, ref_max = 0;
  size_t non_finite = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++non_finite;
      continue;
    }
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
    max_abs = std::max(max_abs, std::fabs(d));
    ref_max = std::max(ref_max, std::fabs(double(ref[i])));
  }
  const double rel = std::sqrt(num / std::max(den, 1e-300));
  const bool ok = non_finite == 0 && rel <= tol;
  std::printf("check %-30s %-8s max |err| %.3g (ref max %.3g) rel L2 %.3g (tol %.1g)%s %s\n",
              variant.c_str(), what, max_abs, ref_max, rel, tol,
              non_finite ? (" non-finite " + std::to_string(non_finite)).c_str() : "",
              ok ? "ok" : "MISMATCH");
  return ok;
}

// ---- timing ------------------------------------------------------------------------------------
// Before every timed run the L2 (50 MiB on an H200) is overwritten, so that the bytes a kernel
// reads come from HBM like after the producing GEMM of a long prefill; CLEF_BENCH_WARM_L2=1 keeps
// it warm instead.
class Timer {
 public:
  Timer() {
    DEV_CUDA_CHECK(cudaEventCreate(&a_));
    DEV_CUDA_CHECK(cudaEventCreate(&b_));
    const char* warm = std::getenv("CLEF_BENCH_WARM_L2");
    if (!(warm && *warm && std::strcmp(warm, "0") != 0)) flush_ = Buf(size_t(128) << 20);
  }
  ~Timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  bool cold_l2() const { return flush_.get() != nullptr; }

  // Median µs of `reps` runs of launch() (enqueued on the default stream) after `warmup` untimed
  // ones; every run is bracketed by its own events.
  template <typename F>
  double median_us(F&& launch, int warmup = 3, int reps = 20) {
    for (int i = 0; i < warmup; ++i) launch();
    DEV_CUDA_CHECK(cudaGetLastError());
    std::vector<float> ms(reps);
    for (int r = 0; r < reps; ++r) {
      if (flush_.get()) DEV_CUDA_CHECK(cudaMemsetAsync(flush_.get(), r & 0xff, flush_.bytes()));
      DEV_CUDA_CHECK(cudaEventRecord(a_));
      launch();
      DEV_CUDA_CHECK(cudaEventRecord(b_));
      DEV_CUDA_CHECK(cudaEventSynchronize(b_));
      DEV_CUDA_CHECK(cudaEventElapsedTime(&ms[r], a_, b_));
    }
    DEV_CUDA_CHECK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    return 1e3 * ms[reps / 2];
  }

 private:
  cudaEvent_t a_, b_;
  Buf flush_;
};

// ---- the table ---------------------------------------------------------------------------------
inline void print_device() {
  int dev = 0;
  cudaDeviceProp p{};
  DEV_CUDA_CHECK(cudaGetDevice(&dev));
  DEV_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  std::printf("device %s (sm_%d%d, %d SMs)\n", p.name, p.major, p.minor, p.multiProcessorCount);
}
inline void print_header(const Timer& t) {
  std::printf("\ntimes: median of 20 runs after warm-up, L2 %s before each run\n",
              t.cold_l2() ? "flushed" : "warm");
  std::printf("%-12s %-30s %6s %10s %12s %12s %7s  %s\n", "family", "variant", "tokens", "us",
              "moved", "achieved", "% peak", "peak compared to");
}
// amount: bytes moved (peak.flops false) or FLOPs (peak.flops true).
inline void print_row(const char* family, const std::string& variant, int tokens, double us,
                      double amount, const Peak& peak) {
  const double per_s = amount / (us * 1e-6);
  char moved[32], achieved[32];
  if (peak.flops) {
    std::snprintf(moved, sizeof moved, "%.2f GFLOP", amount / 1e9);
    std::snprintf(achieved, sizeof achieved, "%.1f TFLOP/s", per_s / 1e12);
  } else {
    std::snprintf(moved, sizeof moved, "%.2f MB", amount / 1e6);
    std::snprintf(achieved, sizeof achieved, "%.0f GB/s", per_s / 1e9);
  }
  std::printf("%-12s %-30s %6d %10.1f %12s %12s %6.1f%%  %s\n", family, variant.c_str(), tokens, us,
              moved, achieved, 100.0 * per_s / peak.per_s, peak.name);
}

}  // namespace clef::dev

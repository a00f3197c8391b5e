// The engine interface shared by the CPU and CUDA backends: a batch of encoded requests in, per
// question option logits (model order) out. Answers must not depend on the batch's other members.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "encoding/encode.h"
#include "model/release.h"

namespace clef::engine {

struct EngineInfo {
  std::string backend;  // "cpu" | "cuda"
  std::string device;   // e.g. "2-thread x86-64 CPU" or "cuda:1 NVIDIA H200, sm_90"
  std::string dtype;    // "float32" | "bfloat16" | "fp8" (cuda: FP8 weights, bf16 activations)
  // The engine's own weight quantisation ("fp8-e4m3-block128" when it runs FP8 weights, even from
  // a bf16 release); "" = none beyond the release's.
  std::string quantization;
  std::map<std::string, std::string>
      kernels;  // linear_attention, attention, gemm -> implementation
  // Versions a remote report needs to be complete (cuda: driver_version, cuda_driver_api,
  // cuda_runtime, cublaslt); empty on the CPU backend.
  std::map<std::string, std::string> versions;
};

// What an engine prepares before it serves: everything a request of up to max_tokens tokens needs,
// so no request pays one-time work (GEMM algorithm choice, graph capture, scratch growth).
struct PrepareOptions {
  int max_tokens = encoding::kDefaultMaxLength;
  int max_questions = 64;    // the request limits: the head's scratch is sized for the largest
  int max_options = 2048;    // request they admit
  std::string tuning_cache;  // folder for persisted GEMM choices; "" = none
  std::function<void(const std::string&)> progress;
};

struct PrepareReport {
  int buckets = 0;  // padded lengths prepared
  int max_bucket = 0;
  int gemm_shapes = 0;         // distinct GEMM shapes the buckets need
  int gemm_shapes_cached = 0;  // of those, taken (and checked) from the tuning cache
  int graphs = 0;              // CUDA graphs captured (token bucket x packed-sequence bucket)
  std::string cache_status;    // off | hit | partial | miss | stale (...) | corrupt (...)
  std::string cache_path;
  double tuning_s = 0, graphs_s = 0, head_s = 0, total_s = 0;
};

// Per request: logits[k] = question k's option logits in MODEL order.
struct ForwardOutput {
  std::vector<std::vector<float>> logits;
};

class ForwardPipeline;  // engine/pipeline.h

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::vector<ForwardOutput> forward(
      const std::vector<const encoding::EncodedRequest*>& batch) = 0;
  virtual EngineInfo info() const = 0;
  // Whether forward() takes requests with images or videos (EncodedRequest::has_media); an engine
  // without a vision tower must never see one (the Decider refuses them first).
  virtual bool supports_media() const { return false; }
  // Called once before serving; the CPU engine has nothing to prepare.
  virtual PrepareReport prepare(const PrepareOptions&) { return {}; }
  // Bytes in use on the engine's device (for /metrics), -1 when not known (the CPU engine).
  virtual int64_t memory_used_bytes() const { return -1; }
  // The engine's own pipeline when it overlaps consecutive batches (the CUDA engine: a batch's
  // head beside the next one's backbone), else null (pipeline.h's serial_pipeline() serves
  // those). Its batches and forward() must not be mixed while a ticket is open.
  virtual ForwardPipeline* native_pipeline() { return nullptr; }
};

enum class Device { Cpu, Cuda };
// Default: the backend's own (cpu: Float32, the only one it runs; cuda: BFloat16). FP8: bf16
// activations with FP8 block-scaled backbone GEMMs (docs/engine.md "FP8"; not implemented yet).
// Fp8Emulated (cpu only): float32 arithmetic on the FP8 CUDA engine's rounded GEMM inputs
// (engine/cpu/fp8_emulation.h): the oracle that separates what FP8 itself costs from the device.
enum class DType { Default, Float32, BFloat16, FP8, Fp8Emulated };
// cuda: Auto picks the fastest kernels the device supports, Generic forces the generic ones.
enum class Kernels { Auto, Generic };

// The names used on the command line, in messages and in JSON ("cpu", "bfloat16", "generic", ...);
// each table lists every value a user can choose (DType::Default has no name there: it is the
// absence of --dtype).
inline constexpr std::pair<const char*, Device> kDeviceNames[] = {{"cpu", Device::Cpu},
                                                                  {"cuda", Device::Cuda}};
inline constexpr std::pair<const char*, DType> kDTypeNames[] = {
    {"float32", DType::Float32},
    {"bfloat16", DType::BFloat16},
    {"fp8", DType::FP8},
    {"fp8-emulated", DType::Fp8Emulated}};
inline constexpr std::pair<const char*, Kernels> kKernelsNames[] = {{"auto", Kernels::Auto},
                                                                    {"generic", Kernels::Generic}};

namespace detail {
template <typename E, size_t N>
constexpr const char* name_in(const std::pair<const char*, E> (&names)[N], E value) {
  for (const auto& [n, v] : names)
    if (v == value) return n;
  return "unknown";
}
}  // namespace detail

constexpr const char* name(Device d) {
  return detail::name_in(kDeviceNames, d);
}
constexpr const char* name(DType t) {
  return t == DType::Default ? "default" : detail::name_in(kDTypeNames, t);
}
constexpr const char* name(Kernels k) {
  return detail::name_in(kKernelsNames, k);
}

struct EngineOptions {
  Device device = Device::Cpu;
  DType dtype = DType::Default;
  Kernels kernels = Kernels::Auto;  // cuda only
  int threads = 0;                  // cpu: 0 = all cores
  int device_index = 0;             // cuda: which GPU (cuda:N)
};

// Throws std::runtime_error with one clear line when the device is unavailable.
std::unique_ptr<Engine> create_engine(std::shared_ptr<const model::Release> release,
                                      const EngineOptions& opts);

}  // namespace clef::engine

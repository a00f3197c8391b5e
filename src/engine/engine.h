// The engine interface shared by the CPU and CUDA backends: a batch of encoded requests in, per
// question option logits (model order) out. Answers must not depend on the batch's other members.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "encoding/encode.h"
#include "model/release.h"

namespace clef::engine {

struct EngineInfo {
  std::string backend;  // "cpu" | "cuda"
  std::string device;   // e.g. "2-thread x86-64 CPU" or "NVIDIA H200, sm_90"
  std::string dtype;    // "float32" | "bfloat16"
  std::map<std::string, std::string>
      kernels;  // linear_attention, attention, gemm -> implementation
  // Versions a remote report needs to be complete (cuda: driver_version, cuda_driver_api,
  // cuda_runtime, cublaslt); empty on the CPU backend.
  std::map<std::string, std::string> versions;
};

// What an engine prepares before it serves: everything a request of up to max_tokens tokens needs,
// so no request pays one-time work (GEMM algorithm choice, graph capture, scratch growth).
struct PrepareOptions {
  int max_tokens = 16384;
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
  std::string cache_status;    // off | hit | partial | miss | stale (...) | corrupt (...)
  std::string cache_path;
  double tuning_s = 0, graphs_s = 0, head_s = 0, total_s = 0;
};

// Per request: logits[k] = question k's option logits in MODEL order.
struct ForwardOutput {
  std::vector<std::vector<float>> logits;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::vector<ForwardOutput> forward(
      const std::vector<const encoding::EncodedRequest*>& batch) = 0;
  virtual EngineInfo info() const = 0;
  // Called once before serving; the CPU engine has nothing to prepare.
  virtual PrepareReport prepare(const PrepareOptions&) { return {}; }
};

struct EngineOptions {
  std::string device = "cpu";    // "cpu" | "cuda"
  std::string dtype;             // "" = backend default (cpu: float32, cuda: bfloat16)
  std::string kernels = "auto";  // cuda: "auto" | "generic" | "hopper"
  int threads = 0;               // cpu: 0 = all cores
};

// Throws std::runtime_error with one clear line when the device is unavailable.
std::unique_ptr<Engine> create_engine(std::shared_ptr<const model::Release> release,
                                      const EngineOptions& opts);

}  // namespace clef::engine

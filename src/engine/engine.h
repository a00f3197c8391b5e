// The engine interface shared by the CPU and CUDA backends: a batch of encoded requests in, per question
// option logits (model order) out. Answers must not depend on the batch's other members.
#pragma once

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
  std::map<std::string, std::string> kernels;  // linear_attention, attention, gemm -> implementation
};

// Per request: logits[k] = question k's option logits in MODEL order.
struct ForwardOutput {
  std::vector<std::vector<float>> logits;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::vector<ForwardOutput> forward(const std::vector<const encoding::EncodedRequest*>& batch) = 0;
  virtual EngineInfo info() const = 0;
};

struct EngineOptions {
  std::string device = "cpu";  // "cpu" | "cuda"
  std::string dtype;           // "" = backend default (cpu: float32, cuda: bfloat16)
  std::string kernels = "auto";  // cuda: "auto" | "generic" | "hopper"
  int threads = 0;             // cpu: 0 = all cores
};

// Throws std::runtime_error with one clear line when the device is unavailable.
std::unique_ptr<Engine> create_engine(std::shared_ptr<const model::Release> release,
                                      const EngineOptions& opts);

}  // namespace clef::engine

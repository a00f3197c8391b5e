// The evidence a report needs to be trusted and compared (docs/spec/benchmark.md): tool version and
// commit, the server's /health body, GPU name, driver, CUDA and cuBLASLt versions. What cannot be
// found is stated as "unknown" (never omitted) and listed in `missing`.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/target.h"

namespace clef::bench {

inline constexpr const char* kUnknown = "unknown";

struct GpuInfo {
  std::string name = kUnknown, driver = kUnknown, cuda = kUnknown;
  // Only a CUDA server is asked for it: other servers need not use (or name) cuBLASLt.
  std::string cublaslt = kUnknown;
  std::string source = "none";  // "health", "nvidia-smi", "health+nvidia-smi", "cpu backend"
};

struct ServerEvidence {
  nlohmann::ordered_json health;  // the /health body, or the string "unknown"
  std::string health_error;
  GpuInfo gpu;
};

// GET /health (once). With a CPU backend the GPU fields are "not applicable"; else they come from
// health fields when the server reports them (its "gpu" object first: name, driver_version,
// cuda_runtime, cublaslt), then from local `nvidia-smi` when the URL is this machine. cublaslt is
// "unknown" only for a CUDA backend that does not report it, else "not reported".
ServerEvidence gather_server_evidence(const Target& t, const ClientOptions& opts);

// GPU name / driver / CUDA version from `nvidia-smi` on this machine; fields stay "unknown" on
// failure.
GpuInfo local_nvidia_smi();

// Evidence paths whose value is "unknown" (the report is incomplete when this is non-empty).
std::vector<std::string> missing_evidence(const nlohmann::ordered_json& evidence);

}  // namespace clef::bench

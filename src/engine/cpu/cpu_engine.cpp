#include "engine/cpu/cpu_engine.h"

#include <cblas.h>

#include <stdexcept>
#include <string>

#include "engine/cpu/backbone.h"
#include "engine/cpu/joint_head.h"
#include "engine/cpu/parallel.h"

namespace clef::engine::cpu {

CpuEngine::CpuEngine(std::shared_ptr<const model::Release> release, int threads)
    : release_(std::move(release)), threads_(resolve_threads(threads)) {
  if (!release_) throw std::runtime_error("cpu engine: no release loaded");
  // OpenBLAS keeps its thread count process-wide; the engine owns the GEMM threads of this process.
  openblas_set_num_threads(threads_);
}

ForwardOutput CpuEngine::run(const encoding::EncodedRequest& enc) const {
  const std::vector<float> hidden = run_backbone(*release_, enc.input_ids, threads_);
  ForwardOutput out;
  out.logits =
      run_joint_head(*release_, hidden.data(), static_cast<int>(enc.input_ids.size()), enc);
  return out;
}

std::vector<ForwardOutput> CpuEngine::forward(
    const std::vector<const encoding::EncodedRequest*>& batch) {
  std::vector<ForwardOutput> outs;
  outs.reserve(batch.size());
  for (const auto* enc : batch) {
    if (!enc) throw std::runtime_error("cpu engine: null request in batch");
    outs.push_back(run(*enc));
  }
  return outs;
}

EngineInfo CpuEngine::info() const {
  EngineInfo i;
  i.backend = "cpu";
  i.device = std::to_string(threads_) + "-thread " +
#if defined(__x86_64__)
             "x86-64 CPU";
#elif defined(__aarch64__)
             "aarch64 CPU";
#else
             "CPU";
#endif
  i.dtype = "float32";
  i.kernels = {{"linear_attention", "sequential gated delta rule (fp32 state)"},
               {"attention", "blocked causal softmax attention (sgemm)"},
               {"gemm", "OpenBLAS sgemm, weights converted per block from their stored dtype"}};
  return i;
}

std::unique_ptr<Engine> make_cpu_engine(std::shared_ptr<const model::Release> release,
                                        const EngineOptions& opts) {
  if (opts.dtype == DType::FP8)
    throw std::runtime_error(
        "the cpu backend runs float32 only (got --dtype fp8); it runs an FP8 release as is, its "
        "weights dequantised to float32 (omit --dtype)");
  if (opts.dtype != DType::Default && opts.dtype != DType::Float32)
    throw std::runtime_error(std::string("the cpu backend runs float32 only (got --dtype ") +
                             name(opts.dtype) + ")");
  if (opts.threads < 0) throw std::runtime_error("cpu engine: threads must be >= 0");
  return std::make_unique<CpuEngine>(std::move(release), opts.threads);
}

}  // namespace clef::engine::cpu

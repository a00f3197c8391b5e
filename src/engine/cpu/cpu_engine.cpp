#include "engine/cpu/cpu_engine.h"

#include <cblas.h>

#include <stdexcept>
#include <string>

#include "engine/cpu/backbone.h"
#include "engine/cpu/joint_head.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/vision_tower.h"

namespace clef::engine::cpu {

CpuEngine::CpuEngine(std::shared_ptr<const model::Release> release, int threads, GemmInputs inputs)
    : release_(std::move(release)), threads_(resolve_threads(threads)), inputs_(inputs) {
  if (!release_) throw std::runtime_error("cpu engine: no release loaded");
  // OpenBLAS keeps its thread count process-wide; the engine owns the GEMM threads of this process.
  openblas_set_num_threads(threads_);
}

ForwardOutput CpuEngine::run(const encoding::EncodedRequest& enc) const {
  if (!enc.has_media()) return run_text(enc);
  const size_t T = enc.input_ids.size();
  if (!release_->vision) {
    throw std::runtime_error(
        "cpu engine: this model has no vision tower (no model.visual.* "
        "weights); it cannot take images or videos");
  }
  if (enc.mm_token_type_ids.size() != T || enc.position_ids.size() != 3 * T) {
    throw std::runtime_error("cpu engine: a media request needs " + std::to_string(T) +
                             " token types and 3 x " + std::to_string(T) + " positions, got " +
                             std::to_string(enc.mm_token_type_ids.size()) + " and " +
                             std::to_string(enc.position_ids.size()));
  }
  const std::vector<float> rows = run_vision_tower(*release_, enc.visual, threads_);
  int64_t image_rows = 0;
  for (const media::Grid& g : enc.visual.image_grids) image_rows += g.tokens();
  MediaInputs media;
  media.visual_rows = rows.data();
  media.image_rows = image_rows;
  media.video_rows = static_cast<int64_t>(rows.size() / release_->text.hidden_size) - image_rows;
  media.token_types = enc.mm_token_type_ids.data();
  media.position_ids = enc.position_ids.data();
  const std::vector<float> hidden =
      run_backbone(*release_, enc.input_ids, threads_, nullptr, &media, inputs_);
  ForwardOutput out;
  out.logits = run_joint_head(*release_, hidden.data(), static_cast<int>(T), enc);
  return out;
}

ForwardOutput CpuEngine::run_text(const encoding::EncodedRequest& enc) const {
  const std::vector<float> hidden =
      run_backbone(*release_, enc.input_ids, threads_, nullptr, nullptr, inputs_);
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
  i.dtype = inputs_ == GemmInputs::Fp8Emulated ? "fp8-emulated" : "float32";
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
  if (opts.dtype != DType::Default && opts.dtype != DType::Float32 &&
      opts.dtype != DType::Fp8Emulated)
    throw std::runtime_error(std::string("the cpu backend runs float32 only (got --dtype ") +
                             name(opts.dtype) + ")");
  if (opts.threads < 0) throw std::runtime_error("cpu engine: threads must be >= 0");
  return std::make_unique<CpuEngine>(
      std::move(release), opts.threads,
      opts.dtype == DType::Fp8Emulated ? GemmInputs::Fp8Emulated : GemmInputs::Float32);
}

}  // namespace clef::engine::cpu

// The float32 CPU engine: backbone (backbone.h) + joint head (joint_head.h), one request at a time.
#pragma once

#include <memory>

#include "engine/cpu/fp8_emulation.h"
#include "engine/engine.h"

namespace clef::engine::cpu {

class CpuEngine : public Engine {
 public:
  // threads: 0 = all cores (OpenBLAS and the per-head std::thread fan-out). inputs: Fp8Emulated
  // makes this the FP8 oracle for tests (fp8_emulation.h); create_engine never asks for it.
  CpuEngine(std::shared_ptr<const model::Release> release, int threads,
            GemmInputs inputs = GemmInputs::Float32);

  std::vector<ForwardOutput> forward(
      const std::vector<const encoding::EncodedRequest*>& batch) override;
  EngineInfo info() const override;
  // Images and videos need the release's vision tower.
  bool supports_media() const override { return release_->vision.has_value(); }

  // One request: vision tower (media requests; refused when the model has none), backbone, head.
  ForwardOutput run(const encoding::EncodedRequest& enc) const;

 private:
  ForwardOutput run_text(const encoding::EncodedRequest& enc) const;

  std::shared_ptr<const model::Release> release_;
  int threads_;
  GemmInputs inputs_;
};

// DType::Default or Float32 only; anything else is refused with a clear message. kernels is
// ignored (the CPU engine has one set).
std::unique_ptr<Engine> make_cpu_engine(std::shared_ptr<const model::Release> release,
                                        const EngineOptions& opts);

}  // namespace clef::engine::cpu

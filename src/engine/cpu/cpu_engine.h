// The float32 CPU engine: backbone (backbone.h) + joint head (joint_head.h), one request at a time.
#pragma once

#include <memory>

#include "engine/engine.h"

namespace clef::engine::cpu {

class CpuEngine : public Engine {
 public:
  // threads: 0 = all cores (OpenBLAS and the per-head std::thread fan-out).
  CpuEngine(std::shared_ptr<const model::Release> release, int threads);

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
};

// DType::Default or Float32 only; anything else is refused with a clear message. kernels is
// ignored (the CPU engine has one set).
std::unique_ptr<Engine> make_cpu_engine(std::shared_ptr<const model::Release> release,
                                        const EngineOptions& opts);

}  // namespace clef::engine::cpu

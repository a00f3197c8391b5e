// Backend selection: Device::Cpu -> the float32 CPU engine, Device::Cuda -> the CUDA engine when
// this build has it.
#include <stdexcept>
#include <string>

#include "engine/cpu/cpu_engine.h"
#include "engine/engine.h"
#ifdef CLEF_HAVE_CUDA
#include "engine/cuda/cuda_engine.h"
#endif

namespace clef::engine {

std::unique_ptr<Engine> create_engine(std::shared_ptr<const model::Release> release,
                                      const EngineOptions& opts) {
  if (!release) throw std::runtime_error("create_engine: no release loaded");
  switch (opts.device) {
    case Device::Cpu:
      return cpu::make_cpu_engine(std::move(release), opts);
    case Device::Cuda:
#ifdef CLEF_HAVE_CUDA
      return cuda::make_cuda_engine(std::move(release), opts);
#else
      throw std::runtime_error("this build has no CUDA backend (device 'cuda' unavailable)");
#endif
  }
  throw std::runtime_error("unknown device " + std::to_string(static_cast<int>(opts.device)) +
                           " (expected cpu or cuda)");
}

}  // namespace clef::engine

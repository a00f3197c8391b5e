// Backend selection. TEMPORARY: the CPU engine (issue 3) and the CUDA engine (issue 6) wire in here.
#include <stdexcept>

#include "engine/engine.h"

namespace clef::engine {

std::unique_ptr<Engine> create_engine(std::shared_ptr<const model::Release> release,
                                      const EngineOptions& opts) {
  (void)release;
  throw std::runtime_error("no engine backend for device '" + opts.device + "' is built yet");
}

}  // namespace clef::engine

// The engine flags shared by `decide`, `serve` and `profile`: --device, --dtype, --kernels,
// --threads, declared once so their names, values, defaults and help never drift apart.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/device_spec.h"
#include "engine/engine.h"

namespace clef::cli {

// Adds the engine flags to `cmd`, parsed into `opts` (which must outlive the parse). The values in
// `opts` when this is called are the defaults --help shows. A value outside a flag's set is a
// usage error from CLI11 (exit 2). --device takes one device (cpu, cuda, cuda:N) unless `devices`
// is given: then also a list or cuda:all, parsed into it (opts gets its first device).
void add_engine_options(CLI::App* cmd, engine::EngineOptions& opts,
                        engine::DeviceSpec* devices = nullptr);

}  // namespace clef::cli

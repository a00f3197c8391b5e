#include "cli/engine_flags.h"

#include <map>
#include <stdexcept>
#include <string>

namespace clef::cli {

namespace {

// One enum flag: CLI11 maps the name to the value (CheckedTransformer); --help shows the set of
// names, like CLI::IsMember would, and the current value as the default.
template <typename E, size_t N>
CLI::Option* add_enum(CLI::App* cmd, const std::string& flag, E& value,
                      const std::pair<const char*, E> (&names)[N], const std::string& help,
                      bool show_default) {
  std::map<std::string, E> map;
  std::string set = "{";
  for (const auto& [n, v] : names) {
    map.emplace(n, v);
    if (set.size() > 1) set += ',';
    set += n;
  }
  set += '}';
  CLI::Option* opt = cmd->add_option(flag, value, help)
                         ->transform(CLI::CheckedTransformer(map).description(set))
                         ->type_name("TEXT");
  if (show_default) opt->default_str(engine::name(value));
  return opt;
}

// --device: parsed at once, so a bad spec is a usage error (exit 2) before anything loads.
void add_device(CLI::App* cmd, engine::EngineOptions& opts, engine::DeviceSpec* devices) {
  auto parse = [&opts, devices](const std::string& text) {
    engine::DeviceSpec spec;
    try {
      spec = engine::parse_device_spec(text);
    } catch (const std::invalid_argument& e) {
      throw CLI::ValidationError(e.what());
    }
    if (!devices && (spec.all || spec.indices.size() != 1))
      throw CLI::ValidationError("--device '" + text +
                                 "': this command runs one device (cpu, cuda or cuda:N); only "
                                 "serve takes a list or cuda:all");
    opts.device = spec.device;
    opts.device_index = spec.indices.empty() ? 0 : spec.indices.front();
    if (devices) *devices = spec;
  };
  const std::string help = devices ? std::string("Engine device(s): ") + engine::kDeviceSpecForms +
                                         "; one engine per listed GPU, all fed from the one queue"
                                   : "Engine device: cpu, cuda or cuda:N (cuda = cuda:0)";
  cmd->add_option_function<std::string>("--device", parse, help)
      ->type_name("TEXT")
      ->default_str(engine::device_label(opts.device, opts.device_index));
}

}  // namespace

void add_engine_options(CLI::App* cmd, engine::EngineOptions& opts, engine::DeviceSpec* devices) {
  add_device(cmd, opts, devices);
  add_enum(cmd, "--dtype", opts.dtype, engine::kDTypeNames,
           "Engine dtype (default: the backend's, float32 on cpu, bfloat16 on cuda; cpu runs "
           "float32 only; fp8 = cuda only: FP8 weights for the backbone's big projections, bf16 "
           "activations; fp8-emulated = cpu only: float32 arithmetic on the values the fp8 engine "
           "multiplies, the FP8 oracle, slow)",
           opts.dtype != engine::DType::Default);
  add_enum(cmd, "--kernels", opts.kernels, engine::kKernelsNames,
           "CUDA kernels: auto (the fastest the device supports) or generic (force the generic "
           "kernels)",
           true);
  cmd->add_option("--threads", opts.threads, "CPU engine threads (0 = all cores)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

}  // namespace clef::cli

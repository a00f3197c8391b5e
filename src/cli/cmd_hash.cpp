// clefserve hash --model DIR: sha256sum-format lines for the release files (pin them with
// --verify).
#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "model/pinning.h"

namespace clef::cli {

void add_hash(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "hash",
      "Print sha256 lines (sha256sum format) for a release's files; check them with --verify");
  auto model = std::make_shared<std::string>();
  cmd->add_option("--model", *model, "Release folder")->required();
  cmd->callback([model, &exit_code] {
    try {
      std::string out = model::format_sha256sum(model::hash_release(*model));
      if (out.empty()) {
        std::fprintf(stderr, "clefserve hash: %s: no release files (*.json, *.safetensors)\n",
                     model->c_str());
        exit_code = 1;
        return;
      }
      std::fwrite(out.data(), 1, out.size(), stdout);
      exit_code = 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "clefserve hash: %s\n", e.what());
      exit_code = 1;
    }
  });
}

}  // namespace clef::cli

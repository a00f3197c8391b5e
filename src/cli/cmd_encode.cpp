// TEMPORARY placeholder until the owning issue lands this subcommand.
#include <cstdio>

#include "cli/commands.h"

namespace clef::cli {

void add_encode(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("encode", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([&exit_code] {
    std::fprintf(stderr, "clefserve encode: not implemented yet\n");
    exit_code = 1;
  });
}

}  // namespace clef::cli

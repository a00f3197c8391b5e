// clefserve: one binary, one subcommand per front-end (see commands.h).
#include <cstdio>
#include <exception>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"clefserve — native server for Cloudflare's Clef decision models"};
  app.set_version_flag("--version", std::string(CLEF_VERSION) + " (" + CLEF_GIT_COMMIT + ")");
  app.require_subcommand(1);
  int exit_code = 0;
  clef::cli::add_tokenize(app, exit_code);
  clef::cli::add_encode(app, exit_code);
  clef::cli::add_decide(app, exit_code);
  clef::cli::add_hash(app, exit_code);
  clef::cli::add_make_model(app, exit_code);
  clef::cli::add_serve(app, exit_code);
  clef::cli::add_bench(app, exit_code);
  clef::cli::add_profile(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clefserve: %s\n", e.what());
    return 1;
  }
  return exit_code;
}

// Each CLI subcommand registers itself on the root app; the callback runs it and sets the exit code.
#pragma once

#include <CLI/CLI.hpp>

namespace clef::cli {

// Exit statuses: 0 ok, 1 failure (I/O, load, internal), 2 refused request / usage error.
void add_tokenize(CLI::App& app, int& exit_code);
void add_encode(CLI::App& app, int& exit_code);
void add_decide(CLI::App& app, int& exit_code);
void add_hash(CLI::App& app, int& exit_code);
void add_make_model(CLI::App& app, int& exit_code);
void add_serve(CLI::App& app, int& exit_code);
void add_bench(CLI::App& app, int& exit_code);
void add_profile(CLI::App& app, int& exit_code);

}  // namespace clef::cli

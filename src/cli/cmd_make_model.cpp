// clefserve make-model: a complete random-weight release folder (see model/make_model.h).
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "model/make_model.h"

namespace clef::cli {

void add_make_model(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("make-model", "Write a random-weight Clef release folder");
  auto opts = std::make_shared<model::MakeModelOptions>();
  cmd->add_option("--preset", opts->preset, "tiny (tests) | small (~0.5B, CPU) | flash | clef")
      ->check(CLI::IsMember(model::make_model_presets()))
      ->default_val("tiny");
  cmd->add_option("--out", opts->out_dir, "Output folder (must not exist or be empty)")->required();
  cmd->add_option("--seed", opts->seed, "Random seed (same seed, same bytes)")->default_val(0);
  cmd->add_option("--tokenizer", opts->tokenizer,
                  "tokenizer.json (or its folder) to copy; default: the built-in tiny-bpe");
  cmd->add_option("--dtype", opts->dtype,
                  "bf16, or fp8: the backbone's big projections in HF fine-grained FP8 (e4m3, "
                  "128x128 blocks)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->default_val("bf16");
  cmd->add_option("--weights", opts->weights,
                  "gaussian (HF-style init) | realistic (heavy tails, outlier channels)")
      ->check(CLI::IsMember({"gaussian", "realistic"}))
      ->default_val("gaussian");
  cmd->add_flag("--force", opts->overwrite, "Replace an existing non-empty output folder");
  cmd->add_option("--threads", opts->threads, "Generator threads (0 = all cores)")->default_val(0);
  cmd->callback([opts, &exit_code] {
    auto start = std::chrono::steady_clock::now();
    opts->progress = [start](const std::string& line) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "[%7.1fs] %s\n", s, line.c_str());
    };
    try {
      model::make_model(*opts);
      exit_code = 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "clefserve make-model: %s\n", e.what());
      exit_code = 1;
    }
  });
}

}  // namespace clef::cli

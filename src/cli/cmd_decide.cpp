// `clefserve decide`: one System One request on stdin -> its response on stdout, through the shared
// service::Decider. Refused request -> {"error": ...} and exit 2; load/engine failure -> stderr,
// exit 1.
#include <cstdio>
#include <exception>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/media_flags.h"
#include "encoding/encode.h"
#include "encoding/request.h"
#include "engine/engine.h"
#include "json/value.h"
#include "model/release.h"
#include "service/decider.h"

namespace clef::cli {

namespace {

struct DecideArgs {
  std::string model_dir;
  engine::EngineOptions engine_options;
  int max_length = encoding::kDefaultMaxLength;
  encoding::Limits limits;
  std::string truncation = "error";
  bool raw = false;
  std::string verify;
  std::string revision;
};

void print_refusal(const std::string& message) {
  json::Value err = json::Value::object({{"error", json::Value::string(message)}});
  std::printf("%s\n", json::dumps(err).c_str());
}

int run_decide(const DecideArgs& a) {
  std::shared_ptr<const model::Release> release;
  std::shared_ptr<engine::Engine> engine;
  try {
    model::LoadOptions lo;
    lo.verify_file = a.verify;
    lo.revision = a.revision;
    release = model::Release::load(a.model_dir, lo);
    engine = engine::create_engine(release, a.engine_options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clefserve decide: %s\n", e.what());
    return 1;
  }

  service::DeciderOptions opts;
  opts.limits = a.limits;
  opts.encode.max_length = a.max_length;
  opts.encode.truncation =
      a.truncation == "allow" ? encoding::Truncation::Allow : encoding::Truncation::Error;
  service::media_engines(opts, {engine});
  service::Decider decider(release, opts);

  const std::string body_text((std::istreambuf_iterator<char>(std::cin)),
                              std::istreambuf_iterator<char>());
  json::ParseError perr;
  const std::optional<json::Value> body = json::parse(body_text, &perr);
  if (!body) {
    print_refusal("request is not valid JSON: " + perr.message);
    return 2;
  }
  try {
    const json::Value response = decider.decide(*body, *engine, a.raw);
    std::printf("%s\n", json::dumps(response).c_str());
    return 0;
  } catch (const encoding::RequestError& e) {
    print_refusal(e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clefserve decide: %s\n", e.what());
    return 1;
  }
}

}  // namespace

void add_decide(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<DecideArgs>();
  auto* cmd = app.add_subcommand("decide", "Answer one System One request read from stdin");
  cmd->add_option("--model", args->model_dir, "Clef release folder")->required();
  add_engine_options(cmd, args->engine_options);
  cmd->add_option("--max-length", args->max_length, "maximum input tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--truncation", args->truncation,
                  "default when the request does not say: allow or error")
      ->check(CLI::IsMember({"allow", "error"}));
  add_media_limit_options(cmd, args->limits);
  cmd->add_flag("--raw", args->raw, "add unrounded per-option logits and probabilities");
  cmd->add_option("--verify", args->verify, "sha256sum-format file to check the release against");
  cmd->add_option("--revision", args->revision, "revision to record for the model");
  cmd->callback([args, &exit_code] { exit_code = run_decide(*args); });
}

}  // namespace clef::cli

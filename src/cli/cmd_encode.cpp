// `clefserve encode`: one System One request on stdin (raw bytes, parsed with Python's semantics)
// -> the token ids and spans the model would see, in the golden fixtures' format. Refused request
// ->
// {"error": ...} and exit 2; a tokenizer that cannot be loaded -> stderr, exit 1.
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/media_flags.h"
#include "encoding/encode.h"
#include "encoding/request.h"
#include "json/value.h"
#include "media/media_config.h"
#include "tokenizer/tokenizer.h"

namespace clef::cli {
namespace {

struct EncodeArgs {
  std::string model_dir;
  int max_length = encoding::kDefaultMaxLength;
  encoding::Limits limits;
  std::string truncation = "error";
};

void print_refusal(const std::string& message) {
  json::Value err = json::Value::object({{"error", json::Value::string(message)}});
  std::printf("%s\n", json::dumps(err).c_str());
}

std::string read_stdin() {
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) out.append(buf, n);
  return out;
}

std::string describe(const encoding::RequestError& e) {
  std::string where;
  for (const auto& part : e.error.loc) where += (where.empty() ? "" : ".") + part;
  return e.error.msg + " (" + e.error.type + " at " + where + ")";
}

int run_encode(const EncodeArgs& a) {
  std::optional<tokenizer::Tokenizer> tok;
  media::MediaConfig media_config;
  try {
    tok.emplace(tokenizer::Tokenizer::load(a.model_dir));
    // A release folder also gives the vision token ids and pixel budgets (a bare tokenizer.json
    // gives none: media requests are then refused).
    media_config = media::load_media_config(a.model_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clefserve encode: %s\n", e.what());
    return 1;
  }
  const std::string text = read_stdin();
  json::ParseError perr;
  const std::optional<json::Value> body = json::parse(text, &perr);
  if (!body) {
    print_refusal("request is not valid JSON: " + perr.message);
    return 2;
  }
  try {
    const encoding::ValidatedRequest req = encoding::validate_request(*body, a.limits);
    encoding::EncodeOptions opts;
    opts.max_length = a.max_length;
    opts.media = media_config;
    opts.max_image_pixels = a.limits.max_image_pixels;
    opts.max_video_frames = a.limits.max_video_frames;
    opts.max_video_seconds = a.limits.max_video_seconds;
    opts.truncation =
        a.truncation == "allow" ? encoding::Truncation::Allow : encoding::Truncation::Error;
    const encoding::EncodedRequest enc = encoding::encode_request(req, *tok, opts);
    std::printf("%s\n", json::dumps(encoding::encoded_to_json(enc)).c_str());
    return 0;
  } catch (const encoding::RequestError& e) {
    print_refusal(describe(e));
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clefserve encode: %s\n", e.what());
    return 1;
  }
}

}  // namespace

void add_encode(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<EncodeArgs>();
  auto* cmd = app.add_subcommand(
      "encode", "Encode one System One request (stdin) into token ids and spans (stdout)");
  cmd->add_option("--model", args->model_dir,
                  "Folder with tokenizer.json (a release folder works), or the file itself")
      ->required();
  cmd->add_option("--max-length", args->max_length, "Context limit in tokens")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--truncation", args->truncation,
                  "Over-long state when the request does not say: error (refuse) or allow (cut)")
      ->check(CLI::IsMember({"error", "allow"}))
      ->capture_default_str();
  add_media_limit_options(cmd, args->limits);
  cmd->callback([args, &exit_code] { exit_code = run_encode(*args); });
}

}  // namespace clef::cli

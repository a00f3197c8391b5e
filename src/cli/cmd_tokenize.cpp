// `clefserve tokenize --tokenizer PATH`: all of stdin (UTF-8) -> JSON array of token ids, one line.
// Exit 1 when the tokenizer cannot be loaded or stdin read, 2 when the text is refused (invalid
// UTF-8).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace clef::cli {

void add_tokenize(CLI::App& app, int& exit_code) {
  auto* cmd =
      app.add_subcommand("tokenize", "Tokenize all of stdin; print the JSON array of token ids");
  auto path = std::make_shared<std::string>();
  cmd->add_option("--tokenizer", *path, "tokenizer.json, or a folder holding one")->required();
  cmd->callback([&exit_code, path] {
    std::optional<tokenizer::Tokenizer> tok;
    try {
      tok.emplace(tokenizer::Tokenizer::load(*path));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "clefserve tokenize: %s\n", e.what());
      exit_code = 1;
      return;
    }
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (std::cin.bad()) {
      std::fprintf(stderr, "clefserve tokenize: cannot read stdin\n");
      exit_code = 1;
      return;
    }
    std::vector<int32_t> ids;
    try {
      ids = tok->encode(text);
    } catch (const tokenizer::TokenizerError& e) {
      std::fprintf(stderr, "clefserve tokenize: %s\n", e.what());
      exit_code = 2;
      return;
    }
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) out += ',';
      out += std::to_string(ids[i]);
    }
    out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    exit_code = std::fflush(stdout) == 0 ? 0 : 1;
  });
}

}  // namespace clef::cli

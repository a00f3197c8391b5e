// `clefserve tokenize` through the real binary (CLEF_BINARY): fixture lines, exit statuses.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/cli_runner.h"

namespace {

const std::string kGolden = std::string(CLEF_SOURCE_DIR) + "/tests/golden/";

using clef::testsupport::CliResult;

CliResult run_tokenize(const std::string& tokenizer, const std::string& input) {
  return clef::testsupport::run_clefserve("tokenize --tokenizer '" + tokenizer + "' 2>/dev/null",
                                          input);
}

TEST(TokenizeCli, PrintsFixtureIds) {
  std::ifstream in(kGolden + "tokenize-qwen3.jsonl");
  std::string line;
  int checked = 0;
  while (std::getline(in, line) && checked < 4) {
    auto j = nlohmann::json::parse(line);
    std::string text = j["text"].get<std::string>();
    if (text.empty()) continue;
    CliResult r =
        run_tokenize(kGolden + "tokenizers/qwen3", text);  // a folder holding tokenizer.json
    ASSERT_EQ(r.status, 0) << text;
    ASSERT_FALSE(r.out.empty());
    EXPECT_EQ(r.out.back(), '\n');
    EXPECT_EQ(nlohmann::json::parse(r.out), j["ids"]) << text;
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

TEST(TokenizeCli, AcceptsTheFilePathAndEmptyInput) {
  CliResult r = run_tokenize(kGolden + "tokenizers/tiny-bpe/tokenizer.json", "");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "[]\n");
}

TEST(TokenizeCli, ExitStatuses) {
  EXPECT_EQ(run_tokenize(kGolden + "tokenizers/tiny-bpe", "ok\xFF").status, 2);
  CliResult missing = run_tokenize(kGolden + "no-such-tokenizer", "text");
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.out, "");
}

}  // namespace

// Every line of the reference fixtures (ids of HF tokenizer(text, add_special_tokens=False)) must
// match.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace {

using clef::tokenizer::Tokenizer;

const std::string kGolden = std::string(CLEF_SOURCE_DIR) + "/tests/golden/";

struct Case {
  int line;
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> read_cases(const std::string& file) {
  std::ifstream in(kGolden + file);
  EXPECT_TRUE(in) << "cannot open " << file;
  std::vector<Case> cases;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    cases.push_back({n, j.at("text").get<std::string>(), j.at("ids").get<std::vector<int32_t>>()});
  }
  return cases;
}

void check_all(const std::string& tokenizer_dir, const std::string& fixture, size_t min_cases) {
  Tokenizer tok = Tokenizer::load(kGolden + "tokenizers/" + tokenizer_dir);
  auto cases = read_cases(fixture);
  ASSERT_GE(cases.size(), min_cases);
  int failures = 0;
  for (const Case& c : cases) {
    auto got = tok.encode(c.text);
    EXPECT_EQ(got, c.ids) << fixture << " line " << c.line << ": " << c.text;
    if (got != c.ids) ++failures;
  }
  EXPECT_EQ(failures, 0);
}

TEST(TokenizerGolden, Qwen3MatchesReference) {
  check_all("qwen3", "tokenize-qwen3.jsonl", 77);
}

TEST(TokenizerGolden, TinyMatchesReference) {
  check_all("tiny-bpe", "tokenize-tiny.jsonl", 77);
}

// Decoding the reference ids gives back the text (NFC-normalized: both fixtures' tokenizers use
// NFC).
TEST(TokenizerGolden, DecodeRoundTripsFixtureText) {
  Tokenizer tok = Tokenizer::load(kGolden + "tokenizers/qwen3/tokenizer.json");
  int checked = 0;
  for (const Case& c : read_cases("tokenize-qwen3.jsonl")) {
    std::string decoded = tok.decode(c.ids);
    // Re-encoding the decoded text must give the same ids (the text may differ only by NFC).
    EXPECT_EQ(tok.encode(decoded), c.ids) << "line " << c.line;
    ++checked;
  }
  EXPECT_GE(checked, 77);
}

}  // namespace

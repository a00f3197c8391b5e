// `clefserve encode` end to end (its CLI contract): raw stdin bytes in, fixture-format
// JSON out; refusals print {"error": ...} and exit 2.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>

#include "json/value.h"
#include "support/cli_runner.h"
#include "support/parse_json.h"

using clef::json::Value;

namespace {

using clef::testsupport::CliResult;

CliResult run_encode(const std::string& stdin_bytes, const std::string& args) {
  return clef::testsupport::run_clefserve("encode " + args, stdin_bytes);
}

using clef::testing::parse_or_die;

std::vector<Value> fixture(const std::string& name) {
  return clef::testing::read_jsonl(std::string(CLEF_SOURCE_DIR) + "/tests/golden/" + name);
}

const std::string kQwen =
    std::string("--model ") + CLEF_SOURCE_DIR + "/tests/golden/tokenizers/qwen3";

}  // namespace

TEST(CliEncode, EdgeFixturesByteForByte) {
  auto lines = fixture("encode-edge-qwen3.jsonl");
  ASSERT_EQ(lines.size(), 10u);
  for (size_t i = 0; i < lines.size(); ++i) {
    const Value& expected = *lines[i].find("expected");
    CliResult r = run_encode(lines[i].find("raw")->as_string(), kQwen + " --truncation allow");
    if (expected.find("error")) {
      EXPECT_EQ(r.status, 2) << "line " << i + 1;
      EXPECT_NE(parse_or_die(r.out).find("error"), nullptr);
    } else {
      EXPECT_EQ(r.status, 0) << "line " << i + 1 << ": " << r.out;
      EXPECT_EQ(r.out, clef::json::dumps(expected) + "\n") << "line " << i + 1;
    }
  }
}

TEST(CliEncode, TruncationPolicyAndMaxLength) {
  // A model fixture line whose state the reference cut to fit max_length (input_tokens == max).
  std::optional<Value> cut;
  for (const Value& line : fixture("models/tiny-r2.expected.jsonl"))
    if (line.find("max_length")) {
      cut = line;
      break;
    }
  ASSERT_TRUE(cut.has_value());
  const std::string body = clef::json::dumps(*cut->find("request"));
  const std::string max = " --max-length " + cut->find("max_length")->int_text();
  const std::string release =
      std::string("--model ") + CLEF_SOURCE_DIR + "/tests/golden/models/tiny-r2";

  CliResult allowed = run_encode(body, release + max + " --truncation allow");
  ASSERT_EQ(allowed.status, 0) << allowed.out;
  EXPECT_EQ(static_cast<int64_t>(parse_or_die(allowed.out).find("input_ids")->items().size()),
            *cut->find("reference_fp32")->find("input_tokens")->as_int64());

  CliResult refused = run_encode(body, release + max);  // default: error
  EXPECT_EQ(refused.status, 2);
  Value err = parse_or_die(refused.out);
  ASSERT_NE(err.find("error"), nullptr);
  EXPECT_NE(err.find("error")->as_string().find("state_too_long"), std::string::npos)
      << refused.out;

  CliResult roomy = run_encode(body, release);  // 16384 by default: fits uncut
  EXPECT_EQ(roomy.status, 0);
  EXPECT_GT(parse_or_die(roomy.out).find("input_ids")->items().size(),
            parse_or_die(allowed.out).find("input_ids")->items().size());
}

TEST(CliEncode, RefusalsAndFailures) {
  CliResult r = run_encode("{\"model\":\"m\",\"state\":\"s\",\"questions\":{}}", kQwen);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(parse_or_die(r.out).find("error"), nullptr);
  r = run_encode("{not json", kQwen);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(parse_or_die(r.out).find("error"), nullptr);
  r = run_encode("[1]", kQwen);
  EXPECT_EQ(r.status, 2);
  r = run_encode("{}", "--model /nonexistent/folder 2>/dev/null");
  EXPECT_EQ(r.status, 1);
  r = run_encode("{}", kQwen + " --truncation sometimes 2>/dev/null");
  EXPECT_EQ(r.status, 2);
  r = run_encode("{}", kQwen + " --max-length 0 2>/dev/null");
  EXPECT_EQ(r.status, 2);
}

// `clefserve encode` end to end (the CLI contract of issue 2): raw stdin bytes in, fixture-format
// JSON out; refusals print {"error": ...} and exit 2.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include "json/value.h"

using clef::json::Value;

namespace {

struct CliRun {
  std::string out;
  int status = -1;
};

CliRun run_encode(const std::string& stdin_bytes, const std::string& args) {
  // Unique per process and call: ctest runs the tests of this file in parallel processes.
  static int calls = 0;
  const std::string in_path = ::testing::TempDir() + "clef_cli_encode_" + std::to_string(getpid()) +
                              "_" + std::to_string(calls++) + ".json";
  {
    std::ofstream f(in_path, std::ios::binary);
    f << stdin_bytes;
  }
  const std::string cmd = std::string(CLEF_BINARY) + " encode " + args + " < " + in_path;
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::remove(in_path.c_str());
  return r;
}

Value parse_or_die(const std::string& text) {
  clef::json::ParseError err;
  auto v = clef::json::parse(text, &err);
  if (!v) throw std::runtime_error(err.message + ": " + text);
  return *v;
}

std::vector<Value> fixture(const std::string& name) {
  std::ifstream in(std::string(CLEF_SOURCE_DIR) + "/tests/golden/" + name);
  std::vector<Value> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(parse_or_die(line));
  return out;
}

const std::string kQwen =
    std::string("--model ") + CLEF_SOURCE_DIR + "/tests/golden/tokenizers/qwen3";

}  // namespace

TEST(CliEncode, EdgeFixturesByteForByte) {
  auto lines = fixture("encode-edge-qwen3.jsonl");
  ASSERT_EQ(lines.size(), 10u);
  for (size_t i = 0; i < lines.size(); ++i) {
    const Value& expected = *lines[i].find("expected");
    CliRun r = run_encode(lines[i].find("raw")->as_string(), kQwen + " --truncation allow");
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

  CliRun allowed = run_encode(body, release + max + " --truncation allow");
  ASSERT_EQ(allowed.status, 0) << allowed.out;
  EXPECT_EQ(static_cast<int64_t>(parse_or_die(allowed.out).find("input_ids")->items().size()),
            *cut->find("reference_fp32")->find("input_tokens")->as_int64());

  CliRun refused = run_encode(body, release + max);  // default: error
  EXPECT_EQ(refused.status, 2);
  Value err = parse_or_die(refused.out);
  ASSERT_NE(err.find("error"), nullptr);
  EXPECT_NE(err.find("error")->as_string().find("state_too_long"), std::string::npos)
      << refused.out;

  CliRun roomy = run_encode(body, release);  // 16384 by default: fits uncut
  EXPECT_EQ(roomy.status, 0);
  EXPECT_GT(parse_or_die(roomy.out).find("input_ids")->items().size(),
            parse_or_die(allowed.out).find("input_ids")->items().size());
}

TEST(CliEncode, RefusalsAndFailures) {
  CliRun r = run_encode("{\"model\":\"m\",\"state\":\"s\",\"questions\":{}}", kQwen);
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

// `clefserve decide` end to end: stdin request -> stdout response, exit statuses 0 / 1 / 2.
#include <gtest/gtest.h>

#include <string>

#include "engine/golden_models.h"
#include "support/cli_runner.h"
#include "support/rounded_response.h"

namespace clef {
namespace {

using testsupport::CliResult;

CliResult run_decide(const std::string& args, const std::string& stdin_text) {
  return testsupport::run_clefserve("decide " + args + " 2>&1", stdin_text);
}

std::string model_arg(const std::string& m) {
  return "--model " + testing::golden_dir() + "/" + m;
}

TEST(CliDecide, RawProbabilitiesMatchReferenceOnTinyR3) {
  const auto records = testing::load_golden("tiny-r3");
  for (const auto& r : records) {
    if (r.max_length != 16384) continue;
    SCOPED_TRACE("line " + std::to_string(r.line));
    const CliResult run = run_decide(
        model_arg("tiny-r3") + " --device cpu --raw --truncation allow", json::dumps(r.request));
    ASSERT_EQ(run.status, 0) << run.out;
    json::ParseError err;
    auto resp = json::parse(run.out, &err);
    ASSERT_TRUE(resp) << run.out;
    // --raw gives the comparator our unrounded probabilities for a value on a rounding boundary.
    const auto mismatches = testsupport::rounded_response_mismatches(*resp, r);
    EXPECT_TRUE(mismatches.empty()) << testsupport::mismatch_lines(mismatches);
    const json::Value* raw = resp->find("raw");
    ASSERT_NE(raw, nullptr);
    for (const auto& [qid, probs] : r.probabilities)
      for (const auto& [oid, ref] : probs)
        EXPECT_NEAR(raw->find(qid)->find("probabilities")->find(oid)->as_double(), ref, 1e-4);
  }
}

TEST(CliDecide, RefusedRequestPrintsErrorAndExits2) {
  CliResult r = run_decide(model_arg("tiny-r2"), R"({"model":"m","state":"x","questions":{}})");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("\"error\""), std::string::npos) << r.out;
  r = run_decide(model_arg("tiny-r2"), "{not json");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("\"error\""), std::string::npos) << r.out;
}

TEST(CliDecide, StateTooLongIsRefusedUnlessTruncationAllowed) {
  const std::string body = R"({"model":"m","state":")" + std::string(3000, 'a') + " b" +
                           R"(","questions":{"q":{"type":"noul"}}})";
  CliResult r = run_decide(model_arg("tiny-r2") + " --max-length 300", body);
  EXPECT_EQ(r.status, 2) << r.out;
  r = run_decide(model_arg("tiny-r2") + " --max-length 300 --truncation allow", body);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"truncated_state_tokens\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"input_tokens\":300"), std::string::npos) << r.out;
}

TEST(CliDecide, LoadFailureIsOneLineOnStderrAndExit1) {
  const CliResult r = run_decide("--model /nonexistent/clef-model", "{}");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("clefserve decide:"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;
}

TEST(CliDecide, CpuRefusesBfloat16) {
  const CliResult r = run_decide(model_arg("tiny-r2") + " --dtype bfloat16", "{}");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("float32"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace clef

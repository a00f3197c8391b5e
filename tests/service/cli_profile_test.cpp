// `clefserve profile --invariance` on the CPU engine: the fixtures' models answer every request of
// a pack with the bits they give it alone and with the same bits twice (the CPU engine's batch
// invariance through the CLI; the hidden-row part is the CUDA engine's and says it did not run).
#include <gtest/gtest.h>

#include <string>

#include "engine/golden_models.h"
#include "support/cli_runner.h"

namespace clef {
namespace {

using testsupport::CliResult;

CliResult run_profile(const std::string& args) {
  return testsupport::run_clefserve("profile " + args + " 2>&1", "");
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(CliProfile, InvarianceOnTheCpuEngine) {
  for (const char* m : {"tiny-r2", "tiny-r3"}) {
    SCOPED_TRACE(m);
    const CliResult r = run_profile("--model " + testing::golden_dir() + "/" + m +
                                    " --device cpu --lengths 300,1000,233,450 --invariance");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(count(r.out, "| logits (served path) |"), 4u) << r.out;
    EXPECT_EQ(count(r.out, "| logits, the pack twice |"), 4u) << r.out;
    EXPECT_EQ(count(r.out, "| 0 of "), 8u) << r.out;
    EXPECT_NE(r.out.find("hidden rows: not compared"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("invariance: every value equal bit for bit"), std::string::npos) << r.out;
  }
}

TEST(CliProfile, InvarianceNeedsTwoRequests) {
  const CliResult r = run_profile("--model " + testing::golden_dir() +
                                  "/tiny-r2 --device cpu --lengths 300 --invariance");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("two or more"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace clef

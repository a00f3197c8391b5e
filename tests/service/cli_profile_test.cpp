// `clefserve profile --invariance` on the CPU engine: the fixtures' models answer every request of
// a pack with the bits they give it alone and with the same bits twice (the CPU engine's batch
// invariance through the CLI; the hidden-row part is the CUDA engine's and says it did not run),
// and `profile --pack`'s one row for a mixed pack.
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

// --pack: one row for the whole pack, its token count the sum of the requests' (the CPU engine has
// no GEMM floor or stages: zeros there).
TEST(CliProfile, PackTimesTheLengthsAsOneForward) {
  const CliResult r = run_profile("--model " + testing::golden_dir() +
                                  "/tiny-r2 --device cpu --lengths 300,500,250 --pack --runs 2 "
                                  "--warmup 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("| 300,500,250 | 3 | 1050 | "), std::string::npos) << r.out;
  EXPECT_EQ(count(r.out, "| 300,500,250 |"), 1u) << r.out;
  // several packs, ';'-separated: a row each
  const CliResult two = run_profile("--model " + testing::golden_dir() +
                                    "/tiny-r2 --device cpu --lengths '300,250;400' --pack --runs 1 "
                                    "--warmup 1");
  ASSERT_EQ(two.status, 0) << two.out;
  EXPECT_NE(two.out.find("| 300,250 | 2 | 550 | "), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("| 400 | 1 | 400 | "), std::string::npos) << two.out;
}

TEST(CliProfile, LengthsMustBeTokenCounts) {
  const CliResult r =
      run_profile("--model " + testing::golden_dir() + "/tiny-r2 --device cpu --lengths '300;400'");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("not a token count: '300;400'"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace clef

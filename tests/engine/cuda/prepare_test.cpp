// prepare(): after it, no admitted request does one-time work (no graph capture, no GEMM
// choice, no head or workspace allocation), answers stay right, and the tuning cache is written,
// reused on the next start (every shape from the file), and rebuilt when damaged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/cpu/backbone.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/versions.h"
#include "engine/engine.h"
#include "engine/golden_models.h"
#include "engine/prepare/token_buckets.h"
#include "support/scratch_dir.h"

namespace clef {
namespace {

namespace fs = std::filesystem;
constexpr int kMaxTokens = 700;

std::unique_ptr<engine::Engine> make(const std::string& dtype) {
  engine::EngineOptions eo;
  eo.device = engine::Device::Cuda;
  eo.dtype = dtype == "float32" ? engine::DType::Float32 : engine::DType::BFloat16;
  return engine::create_engine(testing::load_golden_model("tiny-r2"), eo);
}

engine::cuda::CudaEngine& diag(engine::Engine& e) {
  return dynamic_cast<engine::cuda::CudaEngine&>(e);
}

bool same(const engine::cuda::ColdWork& a, const engine::cuda::ColdWork& b) {
  return a.graphs_captured == b.graphs_captured && a.gemm_plans == b.gemm_plans &&
         a.head_allocations == b.head_allocations && a.workspace_growths == b.workspace_growths;
}

engine::PrepareOptions options(const fs::path& cache) {
  engine::PrepareOptions o;
  o.max_tokens = kMaxTokens;
  o.max_questions = 8;
  o.max_options = 64;
  o.tuning_cache = cache.string();
  return o;
}

class CudaPrepare : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaPrepare, NoOneTimeWorkOnAnyAdmittedRequestAfterPrepare) {
  CLEF_REQUIRE_GPU();
  testing::ScratchDir d;
  auto eng = make(GetParam());
  const engine::PrepareReport rep = eng->prepare(options(d.path()));
  EXPECT_EQ(rep.buckets, static_cast<int>(engine::all_buckets(kMaxTokens).size()));
  EXPECT_EQ(rep.max_bucket, engine::bucket_tokens(kMaxTokens));
  EXPECT_GT(rep.gemm_shapes, 0);
  EXPECT_EQ(rep.gemm_shapes_cached, 0);
  EXPECT_EQ(rep.cache_status.rfind("missing", 0), 0u) << rep.cache_status;
  EXPECT_TRUE(fs::exists(rep.cache_path)) << rep.cache_path;
  const auto before = diag(*eng).cold_work();
  // one graph per token bucket alone, and per (bucket, sequence bucket) for packed batches
  EXPECT_GT(rep.graphs, rep.buckets);
  EXPECT_EQ(before.graphs_captured, static_cast<size_t>(rep.graphs));

  auto release = testing::load_golden_model("tiny-r2");
  auto rng = gputest::fresh_rng();
  std::vector<int> lengths = {1, 7, 8, 9, 255, 256, 257, kMaxTokens};
  std::uniform_int_distribution<int> len(1, kMaxTokens);
  for (int i = 0; i < 12; ++i) lengths.push_back(len(rng));
  for (int T : lengths) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const auto enc = gputest::random_request(rng, T, release->text.vocab_size, 8, 8);
    const auto out = eng->forward({&enc});
    ASSERT_EQ(out.size(), 1u);
    for (const auto& q : out[0].logits)
      for (float x : q) ASSERT_TRUE(std::isfinite(x));
    const auto now = diag(*eng).cold_work();
    EXPECT_TRUE(same(now, before))
        << "graphs " << now.graphs_captured << " plans " << now.gemm_plans << " head allocations "
        << now.head_allocations << " workspace " << now.workspace_growths;
  }
  // Packed batches of 2..40 requests of at least 16 tokens, up to the largest bucket in all: every
  // (token bucket, sequence bucket) they land in was prepared.
  for (int trial = 0; trial < 16; ++trial) {
    const int n = std::uniform_int_distribution<int>(2, 40)(rng);
    std::vector<encoding::EncodedRequest> encs;
    int left = kMaxTokens;
    for (int j = 0; j < n && left >= 16; ++j) {
      const int T = std::uniform_int_distribution<int>(16, std::max(16, left / (n - j)))(rng);
      encs.push_back(gputest::random_request(rng, T, release->text.vocab_size, 4, 4));
      left -= T;
    }
    std::vector<const encoding::EncodedRequest*> batch;
    for (const auto& e : encs) batch.push_back(&e);
    SCOPED_TRACE("packed batch of " + std::to_string(batch.size()));
    ASSERT_EQ(eng->forward(batch).size(), batch.size());
    const auto now = diag(*eng).cold_work();
    EXPECT_TRUE(same(now, before))
        << "graphs " << now.graphs_captured << " plans " << now.gemm_plans << " head allocations "
        << now.head_allocations << " workspace " << now.workspace_growths;
  }
  // The prepared graphs compute the backbone right (CPU float32 engine as oracle).
  for (int T : {5, 300, kMaxTokens}) {
    std::vector<int32_t> ids(T);
    std::uniform_int_distribution<int32_t> id(0, release->text.vocab_size - 1);
    for (auto& x : ids) x = id(rng);
    const auto e = gputest::compare(diag(*eng).last_hidden_state(ids),
                                    engine::cpu::run_backbone(*release, ids, 0));
    EXPECT_EQ(e.non_finite, 0u);
    EXPECT_LE(e.rel_l2, std::string(GetParam()) == "float32" ? 1e-5 : 0.15) << "T=" << T;
  }
  EXPECT_TRUE(same(diag(*eng).cold_work(), before));
}

// Packs at their exact rows (CLEF_EXACT_ROWS_FROM=512 here: the packs of the 512..700-token
// buckets) after prepare(): no graph for those buckets' packs was captured and none is, no GEMM is
// timed (each borrows its bucket's choice), and the answers are finite.
TEST_P(CudaPrepare, PacksAtExactRowsDoNoOneTimeWork) {
  CLEF_REQUIRE_GPU();
  testing::ScratchDir d;
  ASSERT_EQ(::setenv("CLEF_EXACT_ROWS_FROM", "512", 1), 0);
  auto eng = make(GetParam());
  ASSERT_EQ(::unsetenv("CLEF_EXACT_ROWS_FROM"), 0);
  const engine::PrepareReport rep = eng->prepare(options(d.path()));
  const auto before = diag(*eng).cold_work();
  EXPECT_EQ(before.graphs_captured, static_cast<size_t>(rep.graphs));
  auto release = testing::load_golden_model("tiny-r2");
  auto rng = gputest::fresh_rng();
  for (int trial = 0; trial < 12; ++trial) {
    const int n = std::uniform_int_distribution<int>(2, 9)(rng);
    int total = std::uniform_int_distribution<int>(513, kMaxTokens)(rng);
    // Between two buckets (16-token steps here): not in the last 8 tokens of one.
    if ((total + 7) / 8 * 8 == engine::bucket_tokens(total)) total -= 8;
    std::vector<encoding::EncodedRequest> encs;
    for (int j = 0, left = total; j < n; ++j) {
      const int T = j + 1 == n ? left : left / (n - j);
      encs.push_back(gputest::random_request(rng, T, release->text.vocab_size, 4, 4));
      left -= T;
    }
    ASSERT_LT((total + 7) / 8 * 8, engine::bucket_tokens(total));
    std::vector<const encoding::EncodedRequest*> batch;
    for (const auto& e : encs) batch.push_back(&e);
    SCOPED_TRACE("packed batch of " + std::to_string(n) + ", " + std::to_string(total) + " tokens");
    const auto out = eng->forward(batch);
    ASSERT_EQ(out.size(), batch.size());
    for (const auto& o : out)
      for (const auto& q : o.logits)
        for (float x : q) ASSERT_TRUE(std::isfinite(x));
    const auto now = diag(*eng).cold_work();
    EXPECT_TRUE(same(now, before))
        << "graphs " << now.graphs_captured << " plans " << now.gemm_plans << " head allocations "
        << now.head_allocations << " workspace " << now.workspace_growths;
  }
}

TEST_P(CudaPrepare, TuningCacheIsReusedAndRebuiltWhenDamaged) {
  CLEF_REQUIRE_GPU();
  testing::ScratchDir d;
  const engine::PrepareReport first = make(GetParam())->prepare(options(d.path()));
  ASSERT_TRUE(fs::exists(first.cache_path));
  const engine::PrepareReport second = make(GetParam())->prepare(options(d.path()));
  EXPECT_EQ(second.cache_status, "hit");
  EXPECT_EQ(second.gemm_shapes, first.gemm_shapes);
  EXPECT_EQ(second.gemm_shapes_cached, second.gemm_shapes);
  // Damaged (one byte changed): not trusted, every shape measured again, the file rewritten.
  std::string text;
  {
    std::ifstream in(first.cache_path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("\"entries\"");
  ASSERT_NE(at, std::string::npos);
  text[text.find_first_of("0123456789abcdef", text.find('"', text.find('[', at) + 1) + 1)] ^= 1;
  std::ofstream(first.cache_path, std::ios::trunc) << text;
  const engine::PrepareReport third = make(GetParam())->prepare(options(d.path()));
  EXPECT_EQ(third.cache_status.rfind("corrupt", 0), 0u) << third.cache_status;
  EXPECT_EQ(third.gemm_shapes_cached, 0);
  const engine::PrepareReport fourth = make(GetParam())->prepare(options(d.path()));
  EXPECT_EQ(fourth.cache_status, "hit");
  std::printf("%s: tuning %.2f s cold, %.2f s from the cache; graphs %.2f s; head %.2f s\n",
              GetParam(), first.tuning_s, second.tuning_s, second.graphs_s, second.head_s);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaPrepare, ::testing::Values("bfloat16", "float32"));

}  // namespace
}  // namespace clef

namespace clef {
namespace {

TEST(CudaVersions, DriverFromProcTextAndEveryVersionKnownOnThisMachine) {
  EXPECT_EQ(engine::cuda::parse_nvidia_driver_version(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Sun Oct 12 2025\n"
                "GCC version:  gcc version 12.3.0\n"),
            "580.159.04");
  EXPECT_EQ(engine::cuda::parse_nvidia_driver_version("no such line"), "");
  EXPECT_EQ(engine::cuda::parse_nvidia_driver_version("Kernel Module  \n"), "");
  CLEF_REQUIRE_GPU();
  const auto v = engine::cuda::cuda_versions();
  for (const char* k : {"driver_version", "cuda_driver_api", "cuda_runtime", "cublaslt"}) {
    ASSERT_TRUE(v.count(k)) << k;
    EXPECT_NE(v.at(k), "unknown") << k;
    std::printf("%s %s\n", k, v.at(k).c_str());
  }
}

}  // namespace
}  // namespace clef

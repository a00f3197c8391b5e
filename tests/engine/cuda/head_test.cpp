// CudaJointHead against the CPU engine's joint head (engine/cpu/joint_head.h) on the tiny golden
// releases, with fresh random hidden states and random spans every run.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/joint_head.h"
#include "engine/cuda/gemm/gemm.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/joint_head.h"
#include "model/bf16.h"
#include "model/release.h"

namespace {

using clef::encoding::EncodedRequest;
using clef::encoding::QuestionType;
using clef::encoding::Span;
using clef::engine::cuda::CudaJointHead;
using clef::engine::cuda::HeadPrecision;
using clef::gputest::random_request;

using clef::gputest::fresh_seed;
using clef::gputest::have_gpu;

std::shared_ptr<const clef::model::Release> load(const std::string& m) {
  return clef::model::Release::load(std::string(CLEF_SOURCE_DIR) + "/tests/golden/models/" + m);
}

std::vector<double> softmax(const std::vector<float>& x) {
  double mx = -INFINITY, s = 0;
  for (float v : x) mx = std::max(mx, static_cast<double>(v));
  std::vector<double> p(x.size());
  for (size_t i = 0; i < x.size(); ++i) s += (p[i] = std::exp(x[i] - mx));
  for (double& v : p) v /= s;
  return p;
}

struct Diff {
  double logit = 0, logit_rel = 0, prob = 0;
  size_t non_finite = 0;
};

Diff diff(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& ref) {
  Diff d;
  EXPECT_EQ(got.size(), ref.size());
  for (size_t k = 0; k < std::min(got.size(), ref.size()); ++k) {
    EXPECT_EQ(got[k].size(), ref[k].size());
    if (got[k].size() != ref[k].size()) continue;
    for (size_t j = 0; j < got[k].size(); ++j) {
      if (!std::isfinite(got[k][j])) {
        ++d.non_finite;
        continue;
      }
      const double e = std::abs(static_cast<double>(got[k][j]) - ref[k][j]);
      d.logit = std::max(d.logit, e);
      d.logit_rel =
          std::max(d.logit_rel, e / std::max(1.0, std::abs(static_cast<double>(ref[k][j]))));
    }
    const std::vector<double> pg = softmax(got[k]), pr = softmax(ref[k]);
    for (size_t j = 0; j < pg.size(); ++j) d.prob = std::max(d.prob, std::abs(pg[j] - pr[j]));
  }
  return d;
}

struct DevHidden {
  void* p = nullptr;
  DevHidden(const std::vector<float>& h, bool bf16) {
    if (bf16) {
      std::vector<__nv_bfloat16> b(h.size());
      for (size_t i = 0; i < h.size(); ++i) b[i] = __float2bfloat16(h[i]);
      if (cudaMalloc(&p, b.size() * 2) == cudaSuccess)
        cudaMemcpy(p, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
    } else if (cudaMalloc(&p, h.size() * 4) == cudaSuccess) {
      cudaMemcpy(p, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    }
  }
  ~DevHidden() { cudaFree(p); }
  DevHidden(const DevHidden&) = delete;
  DevHidden& operator=(const DevHidden&) = delete;
};

// A GPU head on one tiny release, with a fresh seed (printed by the traces that use it).
struct HeadOnRelease {
  std::shared_ptr<const clef::model::Release> rel;
  int D;
  int64_t vocab;
  clef::engine::cuda::Gemm gemm;
  CudaJointHead head;
  bool bf16;
  uint64_t seed;
  std::mt19937_64 rng;
  HeadOnRelease(const std::string& model, HeadPrecision prec)
      : rel(load(model)),
        D(rel->head.hidden_size),
        vocab(rel->backbone("lm_head.weight").shape[0]),
        head(*rel, prec, gemm),
        bf16(prec == HeadPrecision::BFloat16),
        seed(fresh_seed()),
        rng(seed) {}
};

void run_model(const std::string& model, HeadPrecision prec) {
  HeadOnRelease h(model, prec);
  [[maybe_unused]] auto& [rel, D, vocab, gemm, head, bf16, seed, rng] = h;
  std::normal_distribution<float> n01(0.f, 1.f);
  std::uniform_real_distribution<float> scale_d(0.2f, 8.f), shift_d(-2.f, 2.f);
  Diff worst;
  // Sizes vary so the head's scratch buffers grow and are reused across requests.
  for (int T : {1, 9, 300, 57, 1200, 33}) {
    SCOPED_TRACE(testing::Message()
                 << model << (bf16 ? " bf16" : " fp32") << " seed " << seed << " T " << T);
    const EncodedRequest enc = random_request(rng, T, vocab, 5, 6);
    std::vector<float> hidden(static_cast<size_t>(T) * D);
    const float scale = scale_d(rng), shift = shift_d(rng);
    for (auto& x : hidden) x = n01(rng) * scale + shift;
    // The bf16 head reads bf16 hidden states: the CPU reference gets the same rounded values.
    if (bf16)
      for (auto& x : hidden) x = clef::model::round_to_bf16(x);
    const auto ref = clef::engine::cpu::run_joint_head(*rel, hidden.data(), T, enc);
    DevHidden dh(hidden, bf16);
    ASSERT_NE(dh.p, nullptr);
    const auto got = head.run(dh.p, T, enc, nullptr);
    const Diff d = diff(got, ref);
    EXPECT_EQ(d.non_finite, 0u);
    if (bf16) {
      // bf16 operands in the T-row GEMMs (memory projection, memory keys/values): ~2^-9 relative
      // per operand; the fixture bound for bf16 engines is ~0.05 in probability.
      EXPECT_LT(d.logit_rel, 3e-2);
      EXPECT_LT(d.prob, 1e-2);
    } else {
      EXPECT_LT(d.logit_rel, 1e-4);
      EXPECT_LT(d.prob, 1e-5);
    }
    worst.logit = std::max(worst.logit, d.logit);
    worst.logit_rel = std::max(worst.logit_rel, d.logit_rel);
    worst.prob = std::max(worst.prob, d.prob);
  }
  std::printf("[joint head] %s %s: max |dlogit| %.3g (relative %.3g), max |dp| %.3g vs CPU fp32\n",
              model.c_str(), bf16 ? "bf16" : "fp32", worst.logit, worst.logit_rel, worst.prob);
}

TEST(CudaJointHead, Fp32MatchesCpuTinyR2) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_model("tiny-r2", HeadPrecision::Float32);
}
TEST(CudaJointHead, Fp32MatchesCpuTinyR3) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_model("tiny-r3", HeadPrecision::Float32);
}
TEST(CudaJointHead, Bf16CloseToCpuTinyR2) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_model("tiny-r2", HeadPrecision::BFloat16);
}
TEST(CudaJointHead, Bf16CloseToCpuTinyR3) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_model("tiny-r3", HeadPrecision::BFloat16);
}

// Requests back to back in one hidden buffer, one launch set a group (the packed forward's use),
// against each request alone and against the CPU head: alone and grouped differ only where a
// T-row GEMM's row count moves cuBLASLt to another algorithm. Two groups in one batch, and the
// same batch twice bit for bit.
void run_groups(const std::string& model, HeadPrecision prec) {
  HeadOnRelease h(model, prec);
  [[maybe_unused]] auto& [rel, D, vocab, gemm, head, bf16, seed, rng] = h;
  std::normal_distribution<float> n01(0.f, 1.f);
  SCOPED_TRACE(testing::Message() << model << (bf16 ? " bf16" : " fp32") << " seed " << seed);
  const std::vector<int> lengths = {1, 63, 64, 65, 300, 9, 1200, 33};
  std::vector<EncodedRequest> encs;
  std::vector<std::vector<float>> hiddens;
  std::vector<float> first, rest;  // the rows of requests [0, 3) and [3, n)
  for (size_t r = 0; r < lengths.size(); ++r) {
    const int T = lengths[r];
    encs.push_back(random_request(rng, T, vocab, r % 2 ? 6 : 2, r % 3 ? 5 : 30));
    std::vector<float> h(static_cast<size_t>(T) * D);
    for (auto& x : h) x = n01(rng) * 3.f;
    if (bf16)
      for (auto& x : h) x = clef::model::round_to_bf16(x);
    (r < 3 ? first : rest).insert((r < 3 ? first : rest).end(), h.begin(), h.end());
    hiddens.push_back(std::move(h));
  }
  std::vector<const EncodedRequest*> batch;
  for (const auto& e : encs) batch.push_back(&e);
  std::vector<float> all = first;
  all.insert(all.end(), rest.begin(), rest.end());
  DevHidden d_all(all, bf16), d_first(first, bf16), d_rest(rest, bf16);
  ASSERT_NE(d_all.p, nullptr);
  head.begin(batch, nullptr, {static_cast<int>(batch.size())});
  head.enqueue(d_all.p, nullptr);
  const auto one = head.finish(nullptr);
  head.begin(batch, nullptr, {3, static_cast<int>(batch.size()) - 3});
  head.enqueue(d_first.p, nullptr);
  head.enqueue(d_rest.p, nullptr);
  const auto two = head.finish(nullptr);
  head.begin(batch, nullptr, {static_cast<int>(batch.size())});
  head.enqueue(d_all.p, nullptr);
  EXPECT_EQ(head.finish(nullptr), one) << "the same group twice";
  ASSERT_EQ(one.size(), batch.size());
  ASSERT_EQ(two.size(), batch.size());
  Diff vs_alone, vs_cpu;
  for (size_t r = 0; r < batch.size(); ++r) {
    SCOPED_TRACE("request " + std::to_string(r) + " T " + std::to_string(lengths[r]));
    DevHidden dh(hiddens[r], bf16);
    const auto alone = head.run(dh.p, lengths[r], encs[r], nullptr);
    const auto ref =
        clef::engine::cpu::run_joint_head(*rel, hiddens[r].data(), lengths[r], encs[r]);
    for (const auto* g : {&one, &two}) {
      const Diff a = diff((*g)[r], alone), c = diff((*g)[r], ref);
      EXPECT_EQ(a.non_finite, 0u);
      vs_alone.prob = std::max(vs_alone.prob, a.prob);
      vs_alone.logit_rel = std::max(vs_alone.logit_rel, a.logit_rel);
      vs_cpu.prob = std::max(vs_cpu.prob, c.prob);
      vs_cpu.logit_rel = std::max(vs_cpu.logit_rel, c.logit_rel);
    }
  }
  EXPECT_LT(vs_alone.prob, bf16 ? 2e-3 : 1e-5);
  EXPECT_LT(vs_alone.logit_rel, bf16 ? 1e-2 : 1e-5);
  EXPECT_LT(vs_cpu.prob, bf16 ? 1e-2 : 1e-5);
  EXPECT_LT(vs_cpu.logit_rel, bf16 ? 3e-2 : 1e-4);
  std::printf("[joint head groups] %s %s: max |dp| grouped vs alone %.3g, vs CPU fp32 %.3g\n",
              model.c_str(), bf16 ? "bf16" : "fp32", vs_alone.prob, vs_cpu.prob);
}

TEST(CudaJointHead, GroupsMatchEachRequestAloneTinyR2) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_groups("tiny-r2", HeadPrecision::Float32);
  run_groups("tiny-r2", HeadPrecision::BFloat16);
}
TEST(CudaJointHead, GroupsMatchEachRequestAloneTinyR3) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_groups("tiny-r3", HeadPrecision::Float32);
  run_groups("tiny-r3", HeadPrecision::BFloat16);
}

TEST(CudaJointHead, RefusesBadRequests) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const auto rel = load("tiny-r2");
  const int D = rel->head.hidden_size;
  clef::engine::cuda::Gemm gemm;
  CudaJointHead head(*rel, HeadPrecision::Float32, gemm);
  std::mt19937_64 rng(fresh_seed());
  const int T = 20;
  std::normal_distribution<float> n01(0.f, 1.f);
  std::vector<float> hidden(static_cast<size_t>(T) * D);
  for (auto& x : hidden) x = n01(rng);
  DevHidden dh(hidden, false);
  ASSERT_NE(dh.p, nullptr);
  const EncodedRequest good =
      random_request(rng, T, rel->backbone("lm_head.weight").shape[0], 2, 3);

  EncodedRequest empty_span = good;
  empty_span.questions[0].option_spans[0] = {4, 4};
  EXPECT_THROW(head.run(dh.p, T, empty_span, nullptr), std::runtime_error);
  EncodedRequest outside = good;
  outside.questions[0].question_span = {10, T + 1};
  EXPECT_THROW(head.run(dh.p, T, outside, nullptr), std::runtime_error);
  EncodedRequest bad_id = good;
  bad_id.input_ids[3] = static_cast<int32_t>(rel->backbone("lm_head.weight").shape[0]);
  EXPECT_THROW(head.run(dh.p, T, bad_id, nullptr), std::runtime_error);
  EXPECT_THROW(head.run(dh.p, T - 1, good, nullptr), std::runtime_error);
  EncodedRequest no_questions = good;
  no_questions.questions.clear();
  EXPECT_THROW(head.run(dh.p, T, no_questions, nullptr), std::runtime_error);
  // Groups that do not cover the batch, or a bad request inside a group, are refused whole.
  EXPECT_THROW(head.begin({&good, &good}, nullptr, {1}), std::runtime_error);
  EXPECT_THROW(head.begin({&good}, nullptr, {0, 1}), std::runtime_error);
  EXPECT_THROW(head.begin({&good, &outside}, nullptr, {2}), std::runtime_error);
  // Still usable after the refusals.
  const auto ref = clef::engine::cpu::run_joint_head(*rel, hidden.data(), T, good);
  const Diff d = diff(head.run(dh.p, T, good, nullptr), ref);
  EXPECT_LT(d.logit_rel, 1e-4);
}

}  // namespace

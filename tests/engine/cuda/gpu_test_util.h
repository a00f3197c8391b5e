// Helpers for the backbone GPU tests: fresh random inputs, device copies in the engine's storage
// type, NaN-poisoned outputs, and error measures.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "encoding/encode.h"
#include "engine/cuda/cuda_check.h"
#include "model/bf16.h"
#include "support/ref/random_inputs.h"

namespace clef::gputest {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define CLEF_REQUIRE_GPU() \
  if (!::clef::gputest::have_gpu()) GTEST_SKIP() << "no CUDA device"

// A seed no run repeats (the caller reports it); fresh_rng prints it and seeds a generator.
inline uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

inline std::mt19937_64 fresh_rng() {
  const uint64_t seed = fresh_seed();
  std::printf("[seed %llu]\n", static_cast<unsigned long long>(seed));
  return std::mt19937_64(seed);
}

// A request of T random token ids with 1..max_questions questions of 1..max_options options on
// random spans (question spans up to 40 tokens, options up to 6).
inline encoding::Span random_span(std::mt19937_64& rng, int T, int max_len) {
  std::uniform_int_distribution<int> len_d(1, std::min(max_len, T));
  const int len = len_d(rng);
  std::uniform_int_distribution<int> start_d(0, T - len);
  const int a = start_d(rng);
  return {a, a + len};
}

inline encoding::EncodedRequest random_request(std::mt19937_64& rng, int T, int64_t vocab,
                                               int max_questions, int max_options) {
  encoding::EncodedRequest enc;
  std::uniform_int_distribution<int32_t> id_d(0, static_cast<int32_t>(vocab - 1));
  for (int t = 0; t < T; ++t) enc.input_ids.push_back(id_d(rng));
  std::uniform_int_distribution<int> nq_d(1, max_questions), no_d(1, max_options), type_d(0, 2);
  const int nq = nq_d(rng);
  for (int k = 0; k < nq; ++k) {
    encoding::EncodedQuestion q;
    q.id = "q" + std::to_string(k);
    q.type = static_cast<encoding::QuestionType>(type_d(rng));
    q.question_span = random_span(rng, T, 40);
    const int no = no_d(rng);
    for (int j = 0; j < no; ++j) {
      q.option_spans.push_back(random_span(rng, T, 6));
      q.option_ids.push_back("o" + std::to_string(j));
    }
    enc.questions.push_back(std::move(q));
  }
  return enc;
}

// "1,63,64": a packing's sequence lengths, for a test's trace.
inline std::string comma_list(const std::vector<int>& values) {
  std::string s;
  for (int v : values) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

using engine::ref::randn;
using engine::ref::randu;
using engine::ref::round_all_bf16;

// Device copy of host floats in storage type E (bf16 values must already be bf16-exact to be
// compared).
template <typename E>
engine::cuda::DeviceBuffer to_device(const std::vector<float>& v) {
  engine::cuda::DeviceBuffer b(std::max<size_t>(v.size() * sizeof(E), 1));
  if constexpr (std::is_same_v<E, float>) {
    CLEF_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  } else {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = model::float_to_bf16(v[i]);
    CLEF_CUDA_CHECK(cudaMemcpy(b.get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  }
  return b;
}
// Device copy of host int32 values (tables).
inline engine::cuda::DeviceBuffer to_device_ints(const std::vector<int32_t>& v) {
  engine::cuda::DeviceBuffer b(std::max<size_t>(v.size(), 1) * sizeof(int32_t));
  CLEF_CUDA_CHECK(
      cudaMemcpy(b.get(), v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  return b;
}
// An output buffer of n elements of E filled with NaN (0xFF bytes are NaN in both types).
template <typename E>
engine::cuda::DeviceBuffer poisoned(size_t n) {
  engine::cuda::DeviceBuffer b(std::max<size_t>(n * sizeof(E), 1));
  CLEF_CUDA_CHECK(cudaMemset(b.get(), 0xFF, n * sizeof(E)));
  return b;
}
template <typename E>
std::vector<float> to_host(const engine::cuda::DeviceBuffer& b, size_t n) {
  CLEF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out(n);
  if constexpr (std::is_same_v<E, float>) {
    CLEF_CUDA_CHECK(cudaMemcpy(out.data(), b.get(), n * 4, cudaMemcpyDeviceToHost));
  } else {
    std::vector<uint16_t> h(n);
    CLEF_CUDA_CHECK(cudaMemcpy(h.data(), b.get(), n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) out[i] = model::bf16_to_float(h[i]);
  }
  return out;
}

// A device buffer's first n bytes (FP8 codes, or bf16 bits to compare exactly).
inline std::vector<uint8_t> bytes_to_host(const engine::cuda::DeviceBuffer& b, size_t n) {
  CLEF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> out(n);
  CLEF_CUDA_CHECK(cudaMemcpy(out.data(), b.get(), n, cudaMemcpyDeviceToHost));
  return out;
}

struct Err {
  double rel_l2 = 0, max_abs = 0, ref_max = 0;
  size_t non_finite = 0;
};
inline Err compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Err e;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++e.non_finite;
      continue;
    }
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
    e.ref_max = std::max(e.ref_max, std::fabs(double(ref[i])));
  }
  e.rel_l2 = std::sqrt(num / std::max(den, 1e-300));
  return e;
}
// Every element written and finite, relative L2 error within tol.
#define CLEF_EXPECT_CLOSE(got, ref, tol)                                            \
  do {                                                                              \
    const auto clef_e_ = ::clef::gputest::compare(got, ref);                        \
    EXPECT_EQ(clef_e_.non_finite, 0u);                                              \
    EXPECT_LE(clef_e_.rel_l2, tol)                                                  \
        << "max abs " << clef_e_.max_abs << " (ref max " << clef_e_.ref_max << ")"; \
  } while (0)

}  // namespace clef::gputest

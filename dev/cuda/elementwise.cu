// Workbench: the element-wise family (engine/cuda/kernels/elementwise.h): embed_gather, swiglu and
// to_float. Checks both variants (exact for the copies, against clef_engine_ref for swiglu), then
// times vec8 (KernelPath::Auto) and generic (KernelPath::Generic) at the Clef-flash shapes; bf16
// storage like the production engine.
#include <cstdio>

#include "common.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/elementwise.h"
#include "support/ref/backbone_ref.h"

using namespace clef::engine::cuda;
using namespace clef::dev;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

namespace {

constexpr KernelPath kPaths[] = {KernelPath::Auto, KernelPath::Generic};
constexpr int kVocabRows = 8192;  // rows of the bench's table (a gather reads only T of them)

std::vector<int32_t> random_ids(std::mt19937_64& rng, int T, int V) {
  std::uniform_int_distribution<int> id(0, V - 1);
  std::vector<int32_t> ids(T);
  for (auto& x : ids) x = id(rng);
  return ids;
}
Buf ids_to_device(const std::vector<int32_t>& ids) {
  Buf b(ids.size() * sizeof(int32_t));
  DEV_CUDA_CHECK(
      cudaMemcpy(b.get(), ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  return b;
}

bool check_embed(std::mt19937_64& rng, int T, int D) {
  const int V = 97;
  auto table = rand_e<bf16>(rng, size_t(V) * D);
  const auto ids = random_ids(rng, T, V);
  auto dt = to_device<bf16>(table);
  auto di = ids_to_device(ids);
  std::vector<float> want(size_t(T) * D);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < D; ++i) want[size_t(t) * D + i] = table[size_t(ids[t]) * D + i];
  bool ok = true;
  for (KernelPath path : kPaths) {
    auto out = poisoned<bf16>(want.size());
    embed_gather<bf16>(dt.get<bf16>(), di.get<int32_t>(), out.get<bf16>(), T, D, path, 0);
    ok &= check(embed_gather_variant(D, true, path), "out", to_host<bf16>(out, want.size()), want,
                0.0);
  }
  return ok;
}

bool check_swiglu(std::mt19937_64& rng, int T, int I) {
  auto gu = rand_e<bf16>(rng, size_t(T) * 2 * I, 2.0f);
  auto dgu = to_device<bf16>(gu);
  std::vector<float> want(size_t(T) * I);
  ref::swiglu_ref(gu.data(), want.data(), T, I, true);
  bool ok = true;
  for (KernelPath path : kPaths) {
    auto out = poisoned<bf16>(want.size());
    swiglu<bf16>(dgu.get<bf16>(), out.get<bf16>(), T, I, path, 0);
    ok &= check(swiglu_variant(I, path), "out", to_host<bf16>(out, want.size()), want, 4e-3);
  }
  return ok;
}

bool check_to_float(std::mt19937_64& rng, size_t n) {
  auto x = rand_e<bf16>(rng, n);
  auto dx = to_device<bf16>(x);
  bool ok = true;
  for (KernelPath path : kPaths) {
    auto out = poisoned<float>(n);
    to_float<bf16>(dx.get<bf16>(), out.get<float>(), n, path, 0);
    ok &= check(to_float_variant(path), "out", to_host<float>(out, n), x, 0.0);
  }
  return ok;
}

}  // namespace

int main() {
  print_device();
  auto rng = make_rng();
  const std::vector<int> tokens = bench_tokens();
  if (!checks_pass("elementwise", [&] {
        bool ok = true;
        ok &= check_embed(rng, 41, kHidden);
        ok &= check_embed(rng, 41, 130);  // row bytes not a multiple of 16: generic under Auto
        ok &= check_swiglu(rng, 9, kInter);
        ok &= check_swiglu(rng, 45, 100);  // I not a multiple of 8: generic under Auto
        ok &= check_to_float(rng, 1003);   // vec8 with a 3-element tail
        return ok;
      }))
    return 1;

  const int Tmax = *std::max_element(tokens.begin(), tokens.end());
  auto table = to_device<bf16>(rand_e<bf16>(rng, size_t(kVocabRows) * kHidden));
  auto ids = ids_to_device(random_ids(rng, Tmax, kVocabRows));
  auto hidden = poisoned<bf16>(size_t(Tmax) * kHidden);
  auto gu = to_device<bf16>(rand_e<bf16>(rng, size_t(Tmax) * 2 * kInter, 2.0f));
  auto mid = poisoned<bf16>(size_t(Tmax) * kInter);
  auto hidden_f = poisoned<float>(size_t(Tmax) * kHidden);
  Timer timer;
  print_header(timer);
  for (int T : tokens) {
    for (KernelPath path : kPaths) {
      const double us = timer.median_us([&] {
        embed_gather<bf16>(table.get<bf16>(), ids.get<int32_t>(), hidden.get<bf16>(), T, kHidden,
                           path, 0);
      });
      // T table rows read and written (bf16) + the ids.
      const double bytes = 2.0 * T * kHidden * sizeof(bf16) + T * sizeof(int32_t);
      print_row("elementwise", embed_gather_variant(kHidden, true, path), T, us, bytes, kHbm);
    }
    for (KernelPath path : kPaths) {
      const double us = timer.median_us(
          [&] { swiglu<bf16>(gu.get<bf16>(), mid.get<bf16>(), T, kInter, path, 0); });
      // gate|up read, the product written (bf16).
      const double bytes = 3.0 * T * kInter * sizeof(bf16);
      print_row("elementwise", swiglu_variant(kInter, path), T, us, bytes, kHbm);
    }
    for (KernelPath path : kPaths) {
      const size_t n = size_t(T) * kHidden;
      const double us = timer.median_us(
          [&] { to_float<bf16>(hidden.get<bf16>(), hidden_f.get<float>(), n, path, 0); });
      const double bytes = double(n) * (sizeof(bf16) + sizeof(float));
      print_row("elementwise", to_float_variant(path), T, us, bytes, kHbm);
    }
  }
  return 0;
}

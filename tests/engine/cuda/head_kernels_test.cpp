// The joint head's few-row linear kernel (head_kernels::skinny_linear) against a double-precision
// CPU loop on fresh random inputs: row counts across its 8-row passes, K on and off the 16-byte
// path (K % 8, a misaligned weight pointer), bias / GELU / accumulate, outputs NaN-poisoned first
// (except when accumulating).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/head_kernels.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using namespace clef::gputest;

double gelu_erf(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

TEST(HeadKernels, SkinnyLinearMatchesDoubleReference) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    int M, K, N, w_off;  // w_off: elements the weight pointer sits past a 16-byte boundary
    bool bias, gelu, accumulate;
  };
  for (Case c :
       {Case{1, 4096, 1024, 0, false, false, false}, Case{2, 1024, 3072, 0, true, false, true},
        Case{7, 1024, 4096, 0, true, true, false}, Case{9, 4096, 1000, 0, true, false, false},
        Case{17, 256, 33, 0, false, true, false}, Case{3, 100, 50, 0, true, false, true},
        Case{5, 1024, 64, 1, true, true, false}, Case{64, 64, 96, 0, false, false, true}}) {
    SCOPED_TRACE("M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) +
                 " N=" + std::to_string(c.N) + " w_off=" + std::to_string(c.w_off));
    auto x = randn(rng, size_t(c.M) * c.K);
    auto w = randn(rng, size_t(c.N) * c.K + c.w_off, 0.05f);
    round_all_bf16(w);  // the head's weights are bf16
    auto bias = randn(rng, c.N);
    auto y0 = randn(rng, size_t(c.M) * c.N);
    auto dx = to_device<float>(x), dw = to_device<__nv_bfloat16>(w), db = to_device<float>(bias);
    DeviceBuffer dy = c.accumulate ? to_device<float>(y0) : poisoned<float>(y0.size());
    head_kernels::skinny_linear(dx.get<float>(), c.M, c.K, dw.get<__nv_bfloat16>() + c.w_off, c.N,
                                c.bias ? db.get<float>() : nullptr, c.gelu, c.accumulate,
                                dy.get<float>(), 0);
    std::vector<float> ref(y0.size());
    for (int m = 0; m < c.M; ++m)
      for (int n = 0; n < c.N; ++n) {
        double v = 0;
        for (int k = 0; k < c.K; ++k)
          v += double(x[size_t(m) * c.K + k]) * w[c.w_off + size_t(n) * c.K + k];
        if (c.accumulate) v += y0[size_t(m) * c.N + n];
        if (c.bias) v += bias[n];
        ref[size_t(m) * c.N + n] = float(c.gelu ? gelu_erf(v) : v);
      }
    CLEF_EXPECT_CLOSE(to_host<float>(dy, ref.size()), ref, 2e-6);
  }
}

}  // namespace
}  // namespace clef

#include "vision_fc1.h"

#include "engine/cuda/gemm/gemm.h"
#include "engine/cuda/kernels/vision.h"

namespace clef::dev {

using engine::cuda::DataType;
using engine::cuda::GeluKind;
using engine::cuda::GemmProblem;
using engine::cuda::GemmTuning;
using engine::cuda::KernelPath;
using bf16 = __nv_bfloat16;

void time_fc1_gelu(Timer& timer, const bf16* x, bf16* mid, int rows, int k, int n) {
  auto rng = make_rng();
  engine::cuda::Gemm gemm;
  auto fw = to_device<bf16>(rand_e<bf16>(rng, size_t(n) * k, 0.03f));
  auto fb = to_device<bf16>(rand_e<bf16>(rng, n, 0.5f));
  GemmProblem p;
  p.M = rows;
  p.N = n;
  p.K = k;
  p.a = {x, DataType::BF16, k};
  p.b = {fw.get<bf16>(), DataType::BF16, k};
  p.c = mid;
  p.c_dtype = DataType::BF16;
  p.ldc = n;
  p.bias = fb.get<bf16>();
  p.tuning = GemmTuning::Heuristic;
  const double flops = 2.0 * rows * n * k;
  double us = timer.median_us([&] { gemm.run(p, 0); });
  print_row("vision", "fc1 gemm+bias", rows, us, flops, kBf16Tensor);
  us = timer.median_us([&] {
    gemm.run(p, 0);
    engine::cuda::gelu_inplace<bf16>(mid, size_t(rows) * n, GeluKind::Tanh, KernelPath::Auto, 0);
  });
  print_row("vision", "fc1 gemm+bias, gelu_vec8", rows, us, flops, kBf16Tensor);
  p.gelu = true;
  us = timer.median_us([&] { gemm.run(p, 0); });
  print_row("vision", "fc1 gemm gelu_bias epilogue", rows, us, flops, kBf16Tensor);
}

}  // namespace clef::dev

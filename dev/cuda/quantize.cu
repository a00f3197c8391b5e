// Workbench: the FP8 quantisers (engine/cuda/kernels/quantize.h). Checks codes and scales exactly
// against model/fp8.h, then times the activation quantiser (per token per 128 channels) at the
// Clef-flash projection inputs (hidden 4096, intermediate 12288) and the weight quantiser on one
// MLP matrix, as achieved bandwidth.
#include <cstdio>

#include "common.h"
#include "engine/cuda/kernels/quantize.h"
#include "model/fp8.h"

using namespace clef::engine::cuda;
using namespace clef::dev;
using bf16 = __nv_bfloat16;

namespace {

std::vector<uint8_t> bytes_of(const Buf& b, size_t n) {
  DEV_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> out(n);
  DEV_CUDA_CHECK(cudaMemcpy(out.data(), b.get(), n, cudaMemcpyDeviceToHost));
  return out;
}

// Codes and scales of rows x cols in blocks of br rows x 128 columns, exactly.
bool check_quantize(std::mt19937_64& rng, int rows, int cols, bool weights) {
  auto x = rand_e<bf16>(rng, size_t(rows) * cols, weights ? 0.02f : 1.0f);
  for (size_t i = 0; i < x.size(); i += 41) x[i] *= 64.0f;  // outliers: blocks differ
  round_all_bf16(x);
  const int br = weights ? 128 : 1, nb = (cols + 127) / 128, nr = (rows + br - 1) / br;
  auto dx = to_device<bf16>(x);
  Buf dq(x.size());
  auto ds = poisoned<float>(size_t(nr) * nb);
  if (weights)
    quantize_blocks_e4m3(dx.get<bf16>(), rows, cols, dq.get<uint8_t>(), ds.get<float>(), nb, 1, 0);
  else
    quantize_rows_e4m3(dx.get<bf16>(), rows, cols, cols, dq.get<uint8_t>(), cols, ds.get<float>(),
                       nb, 1, 0);
  const auto q = bytes_of(dq, x.size());
  const auto s = to_host<float>(ds, size_t(nr) * nb);
  size_t bad_codes = 0, bad_scales = 0;
  for (int R = 0; R < nr; ++R)
    for (int b = 0; b < nb; ++b) {
      float amax = 0;
      for (int r = R * br; r < std::min(rows, R * br + br); ++r)
        for (int c = b * 128; c < std::min(cols, b * 128 + 128); ++c)
          amax = std::max(amax, std::fabs(x[size_t(r) * cols + c]));
      const float sc = clef::model::fp8_block_scale(amax);
      bad_scales += s[size_t(R) * nb + b] != sc;
      for (int r = R * br; r < std::min(rows, R * br + br); ++r)
        for (int c = b * 128; c < std::min(cols, b * 128 + 128); ++c)
          bad_codes +=
              q[size_t(r) * cols + c] != clef::model::float_to_e4m3(x[size_t(r) * cols + c] / sc);
    }
  const bool ok = bad_codes == 0 && bad_scales == 0;
  std::printf("check %-30s %dx%d codes off %zu, scales off %zu %s\n",
              weights ? "quantize_blocks_e4m3" : "quantize_rows_e4m3", rows, cols, bad_codes,
              bad_scales, ok ? "ok" : "MISMATCH");
  return ok;
}

}  // namespace

int main() {
  print_device();
  auto rng = make_rng();
  const std::vector<int> tokens = bench_tokens();
  if (!checks_pass("quantize", [&] {
        bool ok = true;
        ok &= check_quantize(rng, 37, kHidden, false);
        ok &= check_quantize(rng, 9, 200, false);  // a partial last block
        ok &= check_quantize(rng, 300, 520, true);
        return ok;
      }))
    return 1;
  const int Tmax = *std::max_element(tokens.begin(), tokens.end());
  auto x = to_device<bf16>(rand_e<bf16>(rng, size_t(Tmax) * kInter));
  Buf q(size_t(Tmax) * kInter);
  Buf s(size_t(kInter / 128) * Tmax * sizeof(float));
  Timer timer;
  print_header(timer);
  for (int T : tokens) {
    for (int cols : {kHidden, kInter}) {
      const int sld = T;  // the GEMM's layout: tokens fastest
      const double us = timer.median_us([&] {
        quantize_rows_e4m3(x.get<bf16>(), T, cols, cols, q.get<uint8_t>(), cols, s.get<float>(), 1,
                           sld, 0);
      });
      // bf16 read, e4m3 written, one float per 128.
      const double bytes = double(T) * cols * 3 + double(T) * (cols / 128) * 4;
      print_row("quantize", cols == kHidden ? "rows_e4m3 (hidden)" : "rows_e4m3 (inter)", T, us,
                bytes, kHbm);
    }
  }
  auto w = to_device<bf16>(rand_e<bf16>(rng, size_t(kInter) * kHidden, 0.02f));
  Buf wq(size_t(kInter) * kHidden), ws(size_t(kInter / 128) * (kHidden / 128) * sizeof(float));
  const double us = timer.median_us([&] {
    quantize_blocks_e4m3(w.get<bf16>(), kInter, kHidden, wq.get<uint8_t>(), ws.get<float>(),
                         kHidden / 128, 1, 0);
  });
  print_row("quantize", "blocks_e4m3 (12288x4096)", kInter, us, double(kInter) * kHidden * 3, kHbm);
  return 0;
}

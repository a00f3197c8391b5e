// Workbench: the vision tower's row kernels (engine/cuda/kernels/vision.h): layer_norm,
// gelu_inplace (tanh and erf), vision_pos_embed_add, vision_rope_split, scatter_rows. Checks the
// LayerNorm and the GELUs against inline fp32 references at a small shape (the full checks are
// test_gpu's VisionKernels.*), then times every kernel at the tower's shapes (4096 patch rows of
// width 1152, 16 heads x 72 padded to 80, MLP width 4304); bf16 storage like the production
// engine.
#include <cstdio>

#include "common.h"
#include "engine/cuda/kernels/vision.h"

using namespace clef::engine::cuda;
using namespace clef::dev;
using bf16 = __nv_bfloat16;

namespace {

constexpr int kRows = 4096, kW = 1152, kHeads = 16, kHd = 72, kHdp = 80, kMlp = 4304, kSide = 48;
constexpr double kTol = 4e-3;  // bf16 outputs

bool check_layer_norm(std::mt19937_64& rng, int rows, int D) {
  auto x = rand_e<bf16>(rng, size_t(rows) * D, 3.0f, 2.0f);
  auto w = randn(rng, D, 0.5f, 1.0f), b = randn(rng, D, 0.5f);
  std::vector<float> want(x.size());
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + size_t(r) * D;
    double sum = 0, sq = 0;
    for (int i = 0; i < D; ++i) sum += xr[i];
    const double mean = sum / D;
    for (int i = 0; i < D; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
    const double inv = 1.0 / std::sqrt(sq / D + 1e-6);
    for (int i = 0; i < D; ++i) want[size_t(r) * D + i] = float((xr[i] - mean) * inv * w[i] + b[i]);
  }
  auto dx = to_device<bf16>(x);
  auto dw = to_device<float>(w), db = to_device<float>(b);
  auto out = poisoned<bf16>(x.size());
  layer_norm<bf16>(dx.get<bf16>(), dw.get<float>(), db.get<float>(), out.get<bf16>(), rows, D,
                   1e-6f, 0);
  return check("layer_norm", "out", to_host<bf16>(out, x.size()), want, kTol);
}

bool check_gelu(std::mt19937_64& rng, GeluKind kind, size_t n) {
  auto x = rand_e<bf16>(rng, n, 3.0f);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    want[i] =
        kind == GeluKind::Tanh
            ? float(0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))))
            : float(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
  }
  auto dx = to_device<bf16>(x);
  gelu_inplace<bf16>(dx.get<bf16>(), n, kind, 0);
  return check(kind == GeluKind::Tanh ? "gelu_tanh" : "gelu_erf", "x", to_host<bf16>(dx, n), want,
               kTol);
}

}  // namespace

int main() {
  print_device();
  auto rng = make_rng();
  if (!checks_pass("vision", [&] {
        bool ok = true;
        ok &= check_layer_norm(rng, 37, kW);
        ok &= check_gelu(rng, GeluKind::Tanh, 10007);
        ok &= check_gelu(rng, GeluKind::Erf, 10007);
        return ok;
      }))
    return 1;

  const size_t nx = size_t(kRows) * kW;
  auto x = to_device<bf16>(rand_e<bf16>(rng, nx, 3.0f));
  auto out = poisoned<bf16>(nx);
  auto w = to_device<float>(randn(rng, kW, 0.5f, 1.0f)), b = to_device<float>(randn(rng, kW, 0.5f));
  auto mid = to_device<bf16>(rand_e<bf16>(rng, size_t(kRows) * kMlp, 3.0f));
  auto table = to_device<bf16>(rand_e<bf16>(rng, size_t(kSide) * kSide * kW, 0.5f));
  auto qkv = to_device<bf16>(rand_e<bf16>(rng, size_t(kRows) * 3 * kW, 1.5f));
  const size_t nh = size_t(kRows) * kHeads * kHdp;
  auto q = poisoned<bf16>(nh), k = poisoned<bf16>(nh), v = poisoned<bf16>(nh);
  std::vector<int32_t> rc(size_t(kRows) * 2), dst_rows(kRows);
  for (int r = 0; r < kRows; ++r) rc[2 * r] = r / 64, rc[2 * r + 1] = r % 64, dst_rows[r] = 7 + r;
  Buf drc(rc.size() * 4), drows(dst_rows.size() * 4);
  DEV_CUDA_CHECK(cudaMemcpy(drc.get(), rc.data(), rc.size() * 4, cudaMemcpyHostToDevice));
  DEV_CUDA_CHECK(
      cudaMemcpy(drows.get(), dst_rows.data(), dst_rows.size() * 4, cudaMemcpyHostToDevice));
  auto inv = to_device<float>(vision_rope_inv_freq(kHd, 10000.0));
  const int kStream = 4096;  // backbone hidden width (the residual stream the rows land in)
  auto stream = poisoned<bf16>(size_t(kRows + 16) * kStream);
  auto merged = to_device<bf16>(rand_e<bf16>(rng, size_t(kRows) * kStream));
  const VisionRopeArgs ra{kRows, kHeads, kHd, kHdp, drc.get<int32_t>(), inv.get<float>()};

  Timer timer;
  print_header(timer);
  const double e = sizeof(bf16);
  double us = timer.median_us([&] {
    layer_norm<bf16>(x.get<bf16>(), w.get<float>(), b.get<float>(), out.get<bf16>(), kRows, kW,
                     1e-6f, 0);
  });
  print_row("vision", "layer_norm", kRows, us, 2.0 * nx * e + 2.0 * kW * 4, kHbm);
  for (GeluKind kind : {GeluKind::Tanh, GeluKind::Erf}) {
    us = timer.median_us(
        [&] { gelu_inplace<bf16>(mid.get<bf16>(), size_t(kRows) * kMlp, kind, 0); });
    print_row("vision", kind == GeluKind::Tanh ? "gelu_tanh [4096, 4304]" : "gelu_erf [4096, 4304]",
              kRows, us, 2.0 * kRows * kMlp * e, kHbm);
  }
  // 64 x 64 patches: every table row read once or more (nominal: once), x read and written.
  us = timer.median_us([&] {
    vision_pos_embed_add<bf16>(x.get<bf16>(), 0, table.get<bf16>(), kSide, 1, 64, 64, kW, 0);
  });
  print_row("vision", "vision_pos_embed_add", kRows, us,
            2.0 * nx * e + double(kSide) * kSide * kW * e, kHbm);
  us = timer.median_us([&] {
    vision_rope_split<bf16>(qkv.get<bf16>(), q.get<bf16>(), k.get<bf16>(), v.get<bf16>(), ra, 0);
  });
  print_row("vision", "vision_rope_split", kRows, us, 3.0 * nx * e + 3.0 * nh * e + rc.size() * 4.0,
            kHbm);
  us = timer.median_us([&] {
    scatter_rows<bf16>(stream.get<bf16>(), kStream, merged.get<bf16>(), drows.get<int32_t>(), kRows,
                       kStream, 0);
  });
  print_row("vision", "scatter_rows [4096, 4096]", kRows, us, 2.0 * kRows * kStream * e, kHbm);
  return 0;
}

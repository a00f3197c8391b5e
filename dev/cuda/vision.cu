// Workbench: the vision tower's row kernels (engine/cuda/kernels/vision.h): layer_norm,
// gelu_inplace (tanh and erf), vision_pos_embed_add, vision_rope_split, scatter_rows,
// patchify_rows (kernels/patchify.h). Checks the LayerNorm and the GELUs (both paths) against
// inline fp32 references at a small shape (the full checks are test_gpu's VisionKernels.*), then
// times every variant (generic beside vec8) at the tower's shapes for a 1024x1024 image (4096 patch
// rows) and a 512x512 one (1024 rows): width 1152, 16 heads x 72 (rope_split also padded to 80, as
// the tower ran before perf-log v12b), MLP width 4304, merger [rows / 4, 4608]; bf16 storage like
// the production engine. Bytes are what each kernel must move (the floor at 4.8 TB/s is
// bytes / 4.8e12).
#include <cstdio>

#include "common.h"
#include "engine/cuda/attention/kv_tiles.h"
#include "engine/cuda/kernels/patchify.h"
#include "engine/cuda/kernels/vision.h"
#include "media/patchify.h"
#include "vision_fc1.h"

using namespace clef::engine::cuda;
using namespace clef::dev;
using bf16 = __nv_bfloat16;

namespace {

// kHdp: the head padding the tower used before perf-log v12b (rope_split timed at both).
constexpr int kW = 1152, kHeads = 16, kHd = 72, kHdp = 80, kMlp = 4304, kSide = 48;
constexpr double kTol = 4e-3;  // bf16 outputs

bool check_layer_norm(std::mt19937_64& rng, int rows, int D, KernelPath path) {
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
                   1e-6f, path, 0);
  return check(layer_norm_variant(D, path), "out", to_host<bf16>(out, x.size()), want, kTol);
}

bool check_gelu(std::mt19937_64& rng, GeluKind kind, size_t n, KernelPath path) {
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
  gelu_inplace<bf16>(dx.get<bf16>(), n, kind, path, 0);
  return check(std::string(gelu_variant(path)) + (kind == GeluKind::Tanh ? " tanh" : " erf"), "x",
               to_host<bf16>(dx, n), want, kTol);
}

constexpr KernelPath kPaths[] = {KernelPath::Generic, KernelPath::Auto};

// Every row kernel at `rows` patch rows (an image of 16 * sqrt(rows) pixels a side), each path.
void time_tower_shape(std::mt19937_64& rng, Timer& timer, int rows) {
  const int side_patches = static_cast<int>(std::lround(std::sqrt(double(rows))));
  const size_t nx = size_t(rows) * kW;
  auto x = to_device<bf16>(rand_e<bf16>(rng, nx, 3.0f));
  auto out = poisoned<bf16>(nx);
  auto w = to_device<float>(randn(rng, kW, 0.5f, 1.0f)), b = to_device<float>(randn(rng, kW, 0.5f));
  auto mid = to_device<bf16>(rand_e<bf16>(rng, size_t(rows) * kMlp, 3.0f));
  auto table = to_device<bf16>(rand_e<bf16>(rng, size_t(kSide) * kSide * kW, 0.5f));
  auto qkv = to_device<bf16>(rand_e<bf16>(rng, size_t(rows) * 3 * kW, 1.5f));
  const size_t nh = size_t(rows) * kHeads * kHdp;
  auto q = poisoned<bf16>(nh), k = poisoned<bf16>(nh), v = poisoned<bf16>(nh);
  const size_t npix = size_t(rows) * 1536;
  auto pix16 = poisoned<bf16>(npix);
  std::vector<int32_t> rc(size_t(rows) * 2), dst_rows(rows / 4);
  for (int r = 0; r < rows; ++r) rc[2 * r] = r / side_patches, rc[2 * r + 1] = r % side_patches;
  for (int r = 0; r < rows / 4; ++r) dst_rows[r] = 7 + r;
  Buf drc(rc.size() * 4), drows(dst_rows.size() * 4);
  DEV_CUDA_CHECK(cudaMemcpy(drc.get(), rc.data(), rc.size() * 4, cudaMemcpyHostToDevice));
  DEV_CUDA_CHECK(
      cudaMemcpy(drows.get(), dst_rows.data(), dst_rows.size() * 4, cudaMemcpyHostToDevice));
  auto inv = to_device<float>(vision_rope_inv_freq(kHd, 10000.0));
  const int kStream = 4096;  // backbone hidden width (the residual stream the merged rows land in)
  auto stream = poisoned<bf16>(size_t(rows / 4 + 16) * kStream);
  auto merged = to_device<bf16>(rand_e<bf16>(rng, size_t(rows / 4) * kStream));

  std::printf("\n%d patch rows (a %dx%d image)\n", rows, 16 * side_patches, 16 * side_patches);
  const double e = sizeof(bf16);
  auto tag = [&](const char* variant, const char* what) {
    return std::string(variant) + " " + what;
  };
  for (KernelPath path : kPaths) {
    double us = timer.median_us([&] {
      layer_norm<bf16>(x.get<bf16>(), w.get<float>(), b.get<float>(), out.get<bf16>(), rows, kW,
                       1e-6f, path, 0);
    });
    print_row("vision", tag(layer_norm_variant(kW, path), "[R,1152]"), rows, us,
              2.0 * nx * e + 2.0 * kW * 4, kHbm);
  }
  for (GeluKind kind : {GeluKind::Tanh, GeluKind::Erf})
    for (KernelPath path : kPaths) {
      // tanh: the MLP's fc1 output [R, 4304]; erf: the merger's [R / 4, 4608].
      const size_t n = kind == GeluKind::Tanh ? size_t(rows) * kMlp : size_t(rows) * kW;
      const double us =
          timer.median_us([&] { gelu_inplace<bf16>(mid.get<bf16>(), n, kind, path, 0); });
      print_row(
          "vision",
          tag(gelu_variant(path), kind == GeluKind::Tanh ? "tanh [R,4304]" : "erf [R/4,4608]"),
          rows, us, 2.0 * n * e, kHbm);
    }
  for (KernelPath path : kPaths) {
    // x read and written, every table row read once or more (nominal: once).
    const double us = timer.median_us([&] {
      vision_pos_embed_add<bf16>(x.get<bf16>(), 0, table.get<bf16>(), kSide, 1, side_patches,
                                 side_patches, kW, path, 0);
    });
    print_row("vision", vision_pos_embed_add_variant(kW, path), rows, us,
              2.0 * nx * e + double(kSide) * kSide * kW * e, kHbm);
  }
  for (int hdp : {kHd, kHdp})
    for (KernelPath path : kPaths) {
      const VisionRopeArgs ra{rows, kHeads, kHd, hdp, drc.get<int32_t>(), inv.get<float>()};
      const double nw = double(rows) * kHeads * hdp;  // elements of each of q, k, v written
      const double us = timer.median_us([&] {
        vision_rope_split<bf16>(qkv.get<bf16>(), q.get<bf16>(), k.get<bf16>(), v.get<bf16>(), ra,
                                path, 0);
      });
      print_row("vision",
                std::string(vision_rope_split_variant(ra, path)) + " hdp " + std::to_string(hdp),
                rows, us, 3.0 * nx * e + 3.0 * nw * e + rc.size() * 4.0, kHbm);
    }
  {
    // K and V written in key tiles (the tower's layout for wg64o4t, padded to 80 columns), q as
    // rows.
    VisionRopeArgs ra{rows, kHeads, kHd, kHd, drc.get<int32_t>(), inv.get<float>()};
    ra.kv_tiled = true;
    const size_t nt = kv_tiled_elems(rows, kHeads, kHd);
    Buf kt(nt * e), vt(nt * e);
    const double us = timer.median_us([&] {
      vision_rope_split<bf16>(qkv.get<bf16>(), q.get<bf16>(), kt.get<bf16>(), vt.get<bf16>(), ra,
                              KernelPath::Auto, 0);
    });
    print_row(
        "vision", std::string(vision_rope_split_variant(ra, KernelPath::Auto)) + " hdp 72", rows,
        us, 3.0 * nx * e + double(rows) * kHeads * kHd * e + 2.0 * nt * e + rc.size() * 4.0, kHbm);
  }
  {
    // The tower's input rows from the image's uint8 frame (what the host now uploads): the frame
    // read (nominally once; each of the two temporal slices reads it) and the bf16 rows written.
    clef::media::VisualInput image;
    image.image_grids = {{1, side_patches, side_patches}};
    image.frames.resize(static_cast<size_t>(clef::media::frames_bytes(image)));
    for (uint8_t& px : image.frames) px = static_cast<uint8_t>(rng() & 255u);
    Buf frames(image.frames.size());
    DEV_CUDA_CHECK(
        cudaMemcpy(frames.get(), image.frames.data(), image.frames.size(), cudaMemcpyHostToDevice));
    for (KernelPath path : kPaths) {
      const double us = timer.median_us(
          [&] { patchify_rows<bf16>(image, frames.get<uint8_t>(), pix16.get<bf16>(), path, 0); });
      print_row("vision", tag(patchify_rows_variant(path), "uint8 frame -> [R,1536]"), rows, us,
                image.frames.size() + npix * e, kHbm);
    }
  }
  for (KernelPath path : kPaths) {
    const double us = timer.median_us([&] {
      scatter_rows<bf16>(stream.get<bf16>(), kStream, merged.get<bf16>(), drows.get<int32_t>(),
                         rows / 4, kStream, path, 0);
    });
    print_row("vision", tag(scatter_rows_variant(kStream, kStream, true, path), "[R/4,4096]"), rows,
              us, 2.0 * (rows / 4) * kStream * e, kHbm);
  }
  time_fc1_gelu(timer, x.get<bf16>(), mid.get<bf16>(), rows, kW, kMlp);
}

}  // namespace

int main() {
  print_device();
  auto rng = make_rng();
  if (!checks_pass("vision", [&] {
        bool ok = true;
        for (KernelPath path : kPaths) {
          ok &= check_layer_norm(rng, 37, kW, path);
          ok &= check_gelu(rng, GeluKind::Tanh, 10007, path);
          ok &= check_gelu(rng, GeluKind::Erf, 10007, path);
        }
        return ok;
      }))
    return 1;
  Timer timer;
  print_header(timer);
  time_tower_shape(rng, timer, 4096);  // 1024 x 1024
  time_tower_shape(rng, timer, 1024);  // 512 x 512
  return 0;
}

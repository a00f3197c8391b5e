#include "engine/cpu/linear.h"

#include <cblas.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/cpu/parallel.h"

namespace clef::engine::cpu {

namespace {

// ~16 MiB of float32 per converted block: large enough for efficient sgemm, small next to the
// model.
constexpr size_t kBlockElems = size_t(1) << 22;

int64_t inner_dim(const model::Tensor& w) {
  if (w.shape.empty()) throw std::runtime_error("tensor " + w.name + " is a scalar, not a matrix");
  int64_t in = 1;
  for (size_t i = 1; i < w.shape.size(); ++i) in *= w.shape[i];
  return in;
}

// Threads for converting `n` weight elements: the GEMM's (OpenBLAS's count, which the engine
// sets), since at 9B parameters a single-threaded conversion would cost more than the sgemm itself
// for short inputs; small conversions stay on the calling thread.
int conversion_threads(size_t n) {
  constexpr size_t kMinPerThread = size_t(1) << 18;
  return std::max(1, std::min(openblas_get_num_threads(), static_cast<int>(n / kMinPerThread)));
}

// Converts elements [offset, offset + n) of w into out, an equal share on each of team's threads.
void to_float_parallel(ThreadTeam& team, const model::Tensor& w, float* out, size_t offset,
                       size_t n) {
  if (team.size() <= 1) return w.to_float(out, offset, n);
  const size_t per = (n + team.size() - 1) / team.size();
  team.run([&](int i) {
    const size_t b = static_cast<size_t>(i) * per, e = std::min(n, b + per);
    if (b < e) w.to_float(out + b, offset + b, e - b);
  });
}

// y = x @ W[row0 : row0 + n_out]^T, the weight converted block by block, every block on the same
// threads (started once here, not once a block).
void sgemm_blocks(const model::Tensor& w, const float* x, int rows, int ldx, float* y, int ldy,
                  int row0, int n_out, int64_t in) {
  const int block = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(n_out, static_cast<int64_t>(kBlockElems) / in)));
  std::vector<float> wbuf(static_cast<size_t>(block) * in);
  ThreadTeam team(conversion_threads(wbuf.size()));
  for (int r = 0; r < n_out; r += block) {
    const int nb = std::min(block, n_out - r);
    to_float_parallel(team, w, wbuf.data(), static_cast<size_t>(row0 + r) * in,
                      static_cast<size_t>(nb) * in);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nb, static_cast<int>(in), 1.0f, x,
                ldx, wbuf.data(), static_cast<int>(in), 0.0f, y + r, ldy);
  }
}

// The same product on the FP8-emulated inputs (the whole tensor's 128x128 blocks start at its
// row 0, not at row0).
void sgemm_fp8_emulated(const model::Tensor& w, const float* x, int rows, int ldx, float* y,
                        int ldy, int row0, int n_out, int64_t in) {
  const int k = static_cast<int>(in);
  std::vector<float> xq(static_cast<size_t>(rows) * k);
  for (int t = 0; t < rows; ++t)
    std::copy_n(x + static_cast<size_t>(t) * ldx, k, xq.data() + static_cast<size_t>(t) * k);
  fp8_emulate_rows(xq.data(), rows, k, k);
  // An FP8 release's weight is already what the device multiplies: its dequantised codes, exactly.
  if (w.dtype == model::DType::F8_E4M3)
    return sgemm_blocks(w, xq.data(), rows, k, y, ldy, row0, n_out, in);
  std::vector<float> wf = w.to_float();
  fp8_emulate_weight_blocks(wf.data(), static_cast<int>(w.shape[0]), k);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n_out, k, 1.0f, xq.data(), k,
              wf.data() + static_cast<size_t>(row0) * k, k, 0.0f, y, ldy);
}

}  // namespace

void linear(const model::Tensor& w, const float* x, int rows, int ldx, float* y, int ldy,
            const float* bias, int row0, int n_out, GemmInputs inputs) {
  const int64_t out_total = w.shape.empty() ? 0 : w.shape[0];
  const int64_t in = inner_dim(w);
  if (n_out < 0) n_out = static_cast<int>(out_total - row0);
  if (row0 < 0 || n_out < 0 || row0 + n_out > out_total)
    throw std::runtime_error("linear: rows [" + std::to_string(row0) + ", " +
                             std::to_string(row0 + n_out) + ") outside " + w.name);
  if (rows <= 0 || n_out == 0) return;
  if (inputs == GemmInputs::Fp8Emulated)
    sgemm_fp8_emulated(w, x, rows, ldx, y, ldy, row0, n_out, in);
  else
    sgemm_blocks(w, x, rows, ldx, y, ldy, row0, n_out, in);
  if (bias) {
    for (int t = 0; t < rows; ++t) {
      float* yr = y + static_cast<size_t>(t) * ldy;
      for (int o = 0; o < n_out; ++o) yr[o] += bias[o];
    }
  }
}

std::vector<float> linear(const model::Tensor& w, const float* x, int rows, const float* bias,
                          GemmInputs inputs) {
  const int out = w.shape.empty() ? 0 : static_cast<int>(w.shape[0]);
  const int in = static_cast<int>(inner_dim(w));
  std::vector<float> y(static_cast<size_t>(rows) * out);
  linear(w, x, rows, in, y.data(), out, bias, 0, -1, inputs);
  return y;
}

std::vector<float> to_f32(const model::Tensor& t) {
  return t.to_float();
}

}  // namespace clef::engine::cpu

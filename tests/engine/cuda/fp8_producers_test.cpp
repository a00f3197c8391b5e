// The FP8 producers (norm.h rms_norm_1p_fp8 / gated_rms_norm_fp8, elementwise.h swiglu_fp8,
// attn_prep.h attn_output_gate_fp8): on random inputs, their codes and scales must equal
// quantize_rows_e4m3 applied to the plain kernel's bf16 output, exactly, and the bf16 copy they
// may also store must equal the plain output bit for bit. Shapes cover the vec8 and generic
// variants, widths that are not multiples of 128 (ragged last block) and rows that are not a
// multiple of 4 (M padded for the GEMM).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/kernels/attn_prep.h"
#include "engine/cuda/kernels/elementwise.h"
#include "engine/cuda/kernels/norm.h"
#include "engine/cuda/kernels/quantize.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using namespace clef::gputest;
using bf16 = __nv_bfloat16;

// bf16-exact random values, with a few large channels so blocks get different scales.
std::vector<float> values(std::mt19937_64& rng, size_t n, float scale) {
  auto v = randn(rng, n, scale);
  for (size_t i = 0; i < n; i += 53) v[i] *= 30.0f;
  round_all_bf16(v);
  return v;
}

// An FP8 output of rows x cols for a GEMM seeing M rows, codes poisoned (0x7f is the NaN code,
// never written by a quantiser) and scales NaN.
struct Fp8Buffers {
  int rows, cols, M;
  DeviceBuffer q, s;
  Fp8Buffers(int r, int c) : rows(r), cols(c), M((r + 3) / 4 * 4) {
    q = DeviceBuffer(size_t(M) * cols);
    CLEF_CUDA_CHECK(cudaMemset(q.get(), 0x7f, size_t(M) * cols));
    s = poisoned<float>(blocks() * size_t(M));
  }
  size_t blocks() const { return size_t(cols + 127) / 128; }
  Fp8Rows rows_view() { return {q.get<uint8_t>(), cols, s.get<float>(), M}; }
};

// quantize_rows_e4m3 of the plain output (rows x cols, row stride ld) into b.
void quantize_plain(const DeviceBuffer& plain, int ld, Fp8Buffers& b) {
  quantize_rows_e4m3(plain.get<bf16>(), b.rows, b.cols, ld, b.q.get<uint8_t>(), b.cols,
                     b.s.get<float>(), 1, b.M, nullptr);
}

// Codes of the real rows and their scales identical; the padded rows are left alone.
void expect_same(Fp8Buffers& fused, Fp8Buffers& ref) {
  const size_t n = size_t(ref.rows) * ref.cols;
  const auto qf = bytes_to_host(fused.q, n), qr = bytes_to_host(ref.q, n);
  size_t bad = 0, poison = 0;
  for (size_t i = 0; i < n; ++i) {
    bad += qf[i] != qr[i];
    poison += qr[i] == 0x7f;
  }
  EXPECT_EQ(bad, 0u) << "codes differ";
  EXPECT_EQ(poison, 0u) << "the reference left codes unwritten";
  const auto sf = to_host<float>(fused.s, ref.blocks() * ref.M),
             sr = to_host<float>(ref.s, ref.blocks() * ref.M);
  for (size_t b = 0; b < ref.blocks(); ++b)
    for (int r = 0; r < ref.rows; ++r) {
      const size_t i = b * ref.M + r;
      ASSERT_TRUE(std::memcmp(&sf[i], &sr[i], 4) == 0 && std::isfinite(sr[i]))
          << "scale of row " << r << " block " << b << ": " << sf[i] << " vs " << sr[i];
    }
}

void expect_bitwise(const DeviceBuffer& a, const DeviceBuffer& b, size_t n) {
  EXPECT_EQ(bytes_to_host(a, n * 2), bytes_to_host(b, n * 2))
      << "the bf16 copy differs from the plain output";
}

const KernelPath kPaths[] = {KernelPath::Auto, KernelPath::Generic};

// One producer against its plain kernel, rows x cols of output: plain(out) writes the bf16 output,
// fused(copy, fp8) the producer's bf16 copy and FP8 rows; the codes and scales must be those of
// the plain output quantised, the copy the plain output bit for bit. Returns that reference.
template <typename Plain, typename Fused>
Fp8Buffers expect_producer_matches_plain(int rows, int cols, Plain&& plain, Fused&& fused) {
  const size_t n = size_t(rows) * cols;
  DeviceBuffer out = poisoned<bf16>(n), copy = poisoned<bf16>(n);
  plain(out.get<bf16>());
  Fp8Buffers ref(rows, cols), got(rows, cols);
  quantize_plain(out, cols, ref);
  fused(copy.get<bf16>(), got.rows_view());
  expect_same(got, ref);
  expect_bitwise(copy, out, n);
  return ref;
}

TEST(Fp8Producers, RmsNorm1pEqualsPlainThenQuantize) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  for (KernelPath path : kPaths)
    for (auto [rows, D, ldx] : std::vector<std::array<int, 3>>{{37, 64, 64},
                                                               {8, 48, 48},
                                                               {21, 4096, 4096},
                                                               {5, 200, 208},
                                                               {9, 100, 100},
                                                               {3, 5120, 5120}}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(D) + " " + kernel_path_name(path));
      const auto x = values(rng, size_t(rows) * ldx, 1.0f);
      auto w = randn(rng, D, 0.3f);
      DeviceBuffer dx = to_device<bf16>(x), dw = to_device<float>(w);
      Fp8Buffers ref = expect_producer_matches_plain(
          rows, D,
          [&](bf16* out) {
            rms_norm_1p<bf16>(dx.get<bf16>(), ldx, dw.get<float>(), out, D, rows, D, 1e-6f, path,
                              nullptr);
          },
          [&](bf16* copy, Fp8Rows fp8) {
            rms_norm_1p_fp8(dx.get<bf16>(), ldx, dw.get<float>(), copy, D, rows, D, 1e-6f, fp8,
                            path, nullptr);
          });
      Fp8Buffers only(rows, D);  // no bf16 copy
      rms_norm_1p_fp8(dx.get<bf16>(), ldx, dw.get<float>(), nullptr, D, rows, D, 1e-6f,
                      only.rows_view(), path, nullptr);
      expect_same(only, ref);
    }
}

TEST(Fp8Producers, GatedRmsNormEqualsPlainThenQuantize) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  for (KernelPath path : kPaths)
    for (auto [T, H, dv] : std::vector<std::array<int, 3>>{
             {37, 4, 16}, {10, 6, 8}, {19, 32, 128}, {6, 5, 12}, {4, 48, 128}}) {
      SCOPED_TRACE(std::to_string(T) + " tokens, " + std::to_string(H) + "x" + std::to_string(dv) +
                   " " + kernel_path_name(path));
      const int ldz = H * dv + 24, W = H * dv;  // z inside a wider row, as in proj
      const auto o = values(rng, size_t(T) * W, 1.0f), z = values(rng, size_t(T) * ldz, 1.5f);
      auto w = randn(rng, dv, 0.5f);
      DeviceBuffer d_o = to_device<bf16>(o), dz = to_device<bf16>(z), dw = to_device<float>(w);
      expect_producer_matches_plain(
          T, W,
          [&](bf16* out) {
            gated_rms_norm<bf16>(d_o.get<bf16>(), dz.get<bf16>(), ldz, dw.get<float>(), out, T, H,
                                 dv, 1e-6f, path, nullptr);
          },
          [&](bf16* copy, Fp8Rows fp8) {
            gated_rms_norm_fp8(d_o.get<bf16>(), dz.get<bf16>(), ldz, dw.get<float>(), copy, T, H,
                               dv, 1e-6f, fp8, path, nullptr);
          });
    }
}

TEST(Fp8Producers, SwigluEqualsPlainThenQuantize) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  for (KernelPath path : kPaths)
    for (auto [T, I] : std::vector<std::array<int, 2>>{{37, 128}, {8, 96}, {13, 12288}, {5, 100}}) {
      SCOPED_TRACE(std::to_string(T) + "x" + std::to_string(I) + " " + kernel_path_name(path));
      const auto gu = values(rng, size_t(T) * 2 * I, 2.0f);
      DeviceBuffer dgu = to_device<bf16>(gu);
      expect_producer_matches_plain(
          T, I, [&](bf16* out) { swiglu<bf16>(dgu.get<bf16>(), out, T, I, path, nullptr); },
          [&](bf16* copy, Fp8Rows fp8) { swiglu_fp8(dgu.get<bf16>(), copy, T, I, fp8, nullptr); });
    }
}

TEST(Fp8Producers, AttentionOutputGateEqualsPlainThenQuantize) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  for (KernelPath path : kPaths)
    for (auto [T, nh, hd] :
         std::vector<std::array<int, 3>>{{37, 4, 32}, {9, 3, 32}, {17, 16, 256}, {6, 32, 128}}) {
      SCOPED_TRACE(std::to_string(T) + " tokens, " + std::to_string(nh) + "x" + std::to_string(hd) +
                   " " + kernel_path_name(path));
      const int W = nh * hd, ld = 2 * W + 2 * 2 * hd;  // proj = [q/gate | k | v]
      const auto attn = values(rng, size_t(T) * W, 1.0f), proj = values(rng, size_t(T) * ld, 2.0f);
      DeviceBuffer plain = to_device<bf16>(attn), dproj = to_device<bf16>(proj);
      DeviceBuffer fused_attn = to_device<bf16>(attn), kept = to_device<bf16>(attn);
      attn_output_gate<bf16>(plain.get<bf16>(), dproj.get<bf16>(), ld, T, nh, hd, path, nullptr);
      Fp8Buffers ref(T, W), fused(T, W), only(T, W);
      quantize_plain(plain, W, ref);
      attn_output_gate_fp8(fused_attn.get<bf16>(), dproj.get<bf16>(), ld, T, nh, hd, true,
                           fused.rows_view(), nullptr);
      expect_same(fused, ref);
      expect_bitwise(fused_attn, plain, size_t(T) * W);
      // store = false leaves attn as it was.
      attn_output_gate_fp8(kept.get<bf16>(), dproj.get<bf16>(), ld, T, nh, hd, false,
                           only.rows_view(), nullptr);
      expect_same(only, ref);
      expect_bitwise(kept, to_device<bf16>(attn), size_t(T) * W);
    }
}

TEST(Fp8Producers, RefuseRowsTheyCannotStageAndBadOutputs) {
  CLEF_REQUIRE_GPU();
  const int T = 4, I = 23553;  // above the 23552 values one block stages
  DeviceBuffer gu(size_t(T) * 2 * I * 2), q(size_t(T) * I), s(size_t(T) * 4 * 200);
  const Fp8Rows f{q.get<uint8_t>(), I, s.get<float>(), T};
  EXPECT_THROW(swiglu_fp8(gu.get<bf16>(), nullptr, T, I, f, nullptr), std::invalid_argument);
  const Fp8Rows narrow{q.get<uint8_t>(), 64, s.get<float>(), T};  // ld below the row
  EXPECT_THROW(swiglu_fp8(gu.get<bf16>(), nullptr, T, 128, narrow, nullptr), std::invalid_argument);
  const Fp8Rows few{q.get<uint8_t>(), 128, s.get<float>(), T - 1};  // M below the rows
  EXPECT_THROW(swiglu_fp8(gu.get<bf16>(), nullptr, T, 128, few, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace clef

// The vision tower's row kernels (engine/cuda/kernels/vision.h) and the multimodal RoPE of the
// backbone's attention prep against the float32 CPU engine (engine/cpu: layer_norm, the GELUs,
// apply_rope, mrope_tables) or, where the CPU code is not a callable unit, an inline port of its
// formula; both storage types, both kernel paths (Auto: the vec8 variants where the shape allows,
// Generic), fresh random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/cpu/gated_attention.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/vision_tower.h"
#include "engine/cuda/attention/kv_tiles.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/attn_prep.h"
#include "engine/cuda/kernels/vision.h"
#include "engine/golden_models.h"
#include "model/bf16.h"
#include "support/ref/backbone_ref.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using namespace clef::gputest;
namespace ref = clef::engine::ref;
namespace cpu = clef::engine::cpu;
using bf16 = __nv_bfloat16;

template <typename E>
constexpr bool kBf16 = std::is_same_v<E, bf16>;

template <typename E>
std::vector<float> rand_e(std::mt19937_64& rng, size_t n, float scale = 1.0f, float mean = 0.0f) {
  auto v = randn(rng, n, scale, mean);
  if (kBf16<E>) round_all_bf16(v);
  return v;
}

// Each row's patch (r, c), in [0, 200] (the RoPE tests' angles).
std::vector<int32_t> random_rc(std::mt19937_64& rng, int rows) {
  std::vector<int32_t> rc(size_t(rows) * 2);
  std::uniform_int_distribution<int> pos(0, 200);
  for (auto& x : rc) x = pos(rng);
  return rc;
}

float round_e(float x, bool to_bf16) {
  return to_bf16 ? model::round_to_bf16(x) : x;
}

// One bf16 ulp at |x| (the spacing of bf16 values there; 8 significand bits).
double bf16_ulp(double x) {
  const double a = std::max(std::fabs(x), 1e-30);
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 7);
}

// Element-wise: |got - want| <= allowed(i), where want is the fp32 CPU value and the allowance is
// 1 bf16 ulp of want plus `slack[i]` (bf16), or `slack[i]` alone (float). Reports the first
// misses.
template <typename E>
void expect_each_near(const std::vector<float>& got, const std::vector<float>& want,
                      const std::vector<double>& slack, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double allowed = (kBf16<E> ? bf16_ulp(want[i]) : 0.0) + slack[i];
    const double err = std::fabs(double(got[i]) - want[i]);
    if (!(err <= allowed)) {  // NaN (an unwritten output) fails too
      if (++bad <= 5)
        ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << " want " << want[i]
                      << " (|err| " << err << " > " << allowed << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << want.size() << " outside the bound";
}

template <typename T>
DeviceBuffer ints_to_device(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 1));
  CLEF_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

constexpr KernelPath kPaths[] = {KernelPath::Auto, KernelPath::Generic};

template <typename E>
class VisionKernels : public ::testing::Test {};
using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(VisionKernels, Types);

// LayerNorm vs engine::cpu::layer_norm (double statistics) on rows with a non-zero mean; the tower
// width 1152 (vec8: a warp per row; generic: the row in registers), odd row counts (a partial last
// block of warps), the widest vec8 row (2048), widths the generic kernel takes under Auto (not a
// multiple of 8, above 2048) and a wide row (the loop path); in place gives the same bits.
TYPED_TEST(VisionKernels, LayerNorm) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    int rows, D;
  };
  EXPECT_STREQ(layer_norm_variant(1152, KernelPath::Auto), "layer_norm_vec8");
  EXPECT_STREQ(layer_norm_variant(1152, KernelPath::Generic), "layer_norm_generic");
  EXPECT_STREQ(layer_norm_variant(300, KernelPath::Auto), "layer_norm_generic");
  EXPECT_STREQ(layer_norm_variant(2056, KernelPath::Auto), "layer_norm_generic");
  for (Case c : {Case{1, 1152}, Case{37, 1152}, Case{700, 1152}, Case{5, 300}, Case{3, 20000},
                 Case{13, 8}, Case{9, 1000}, Case{11, 2048}, Case{7, 2056}, Case{33, 1004}})
    for (KernelPath path : kPaths) {
      SCOPED_TRACE("rows=" + std::to_string(c.rows) + " D=" + std::to_string(c.D) + " " +
                   layer_norm_variant(c.D, path));
      const size_t n = size_t(c.rows) * c.D;
      auto x = rand_e<E>(rng, n, 3.0f, 2.0f);
      auto w = randn(rng, c.D, 0.5f, 1.0f), b = randn(rng, c.D, 0.5f);
      round_all_bf16(w);
      round_all_bf16(b);
      std::vector<float> want(n);
      cpu::layer_norm(x.data(), w.data(), b.data(), 1e-6f, c.rows, c.D, want.data());
      auto dx = to_device<E>(x);
      auto dw = to_device<float>(w), db = to_device<float>(b);
      auto out = poisoned<E>(n);
      layer_norm<E>(dx.template get<E>(), dw.template get<float>(), db.template get<float>(),
                    out.template get<E>(), c.rows, c.D, 1e-6f, path, 0);
      const auto got = to_host<E>(out, n);
      // fp32 statistics against double ones: a few fp32 ulps of the row's largest value (an output
      // near 0 can be the difference of two such values).
      std::vector<double> slack(n);
      for (int r = 0; r < c.rows; ++r) {
        double mx = 1.0;
        for (int i = 0; i < c.D; ++i)
          mx = std::max(mx, std::fabs(double(want[size_t(r) * c.D + i])));
        std::fill(slack.begin() + size_t(r) * c.D, slack.begin() + size_t(r + 1) * c.D, 2e-6 * mx);
      }
      expect_each_near<E>(got, want, slack, "layer_norm");
      layer_norm<E>(dx.template get<E>(), dw.template get<float>(), db.template get<float>(),
                    dx.template get<E>(), c.rows, c.D, 1e-6f, path, 0);  // out aliases x
      EXPECT_EQ(to_host<E>(dx, n), got) << "in place differs from out of place";
    }
}

// Both GELUs vs engine::cpu::gelu_tanhf / gelu_erff, aligned (16-byte chunks and a tail) and
// misaligned (scalar) buffers.
TYPED_TEST(VisionKernels, Gelu) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  for (GeluKind kind : {GeluKind::Tanh, GeluKind::Erf}) {
    for (int off : {0, 1})
      for (KernelPath path : kPaths) {
        SCOPED_TRACE(std::string(kind == GeluKind::Tanh ? "tanh" : "erf") + " off " +
                     std::to_string(off) + " " + gelu_variant(path));
        const size_t n = (size_t(1) << 20) + 5;
        auto x = rand_e<E>(rng, n, 3.0f);
        for (size_t i = 0; i < 64; ++i) x[i] = round_e(-12.0f + 0.375f * i, kBf16<E>);  // tails
        std::vector<float> padded(n + off, 0.0f);
        std::copy(x.begin(), x.end(), padded.begin() + off);
        auto dx = to_device<E>(padded);
        gelu_inplace<E>(dx.template get<E>() + off, n, kind, path, 0);
        auto got = to_host<E>(dx, n + off);
        got.erase(got.begin(), got.begin() + off);
        std::vector<float> want(n);
        std::vector<double> slack(n);
        for (size_t i = 0; i < n; ++i) {
          want[i] = kind == GeluKind::Tanh ? cpu::gelu_tanhf(x[i]) : cpu::gelu_erff(x[i]);
          // fp32 library functions differ by a few ulps; 1 + tanh / 1 + erf cancels for x << 0.
          slack[i] =
              2e-6 * std::fabs(double(want[i])) + 1e-6 * std::max(1.0, std::fabs(double(x[i])));
        }
        expect_each_near<E>(got, want, slack, "gelu");
      }
  }
}

// The CPU tower's vision_position_embedding (engine/cpu/vision_tower.cpp) ported line by line
// (it needs a release), then the tower's residual add, rounded where the kernel rounds: patch i of
// an h x w grid, block-major order, side x side table.
std::vector<float> pos_embed_ref(const std::vector<float>& table, int side, int h, int w, int W,
                                 const std::vector<float>& x_rows, bool to_bf16) {
  struct Taps {
    int lo = 0, hi = 0;
    float w_lo = 0, w_hi = 0;
  };
  auto taps = [&](int n) {
    std::vector<Taps> out(n);
    for (int i = 0; i < n; ++i) {
      const float src = (static_cast<float>(i) * static_cast<float>(side - 1)) /
                        static_cast<float>(std::max(n - 1, 1));
      const int f = static_cast<int>(std::floor(src));
      out[i].lo = std::min(f, side - 1);
      out[i].hi = std::min(f + 1, side - 1);
      out[i].w_lo = 1.0f - std::fabs(src - static_cast<float>(f));
      out[i].w_hi = std::max(0.0f, 1.0f - std::fabs(src - static_cast<float>(f) - 1.0f));
    }
    return out;
  };
  const std::vector<Taps> tr = taps(h), tc = taps(w);
  std::vector<float> out(x_rows);
  const int64_t hw = int64_t(h) * w;
  for (size_t row = 0; row < out.size() / W; ++row) {
    const int64_t i = static_cast<int64_t>(row) % hw;
    const int64_t block = i / 4, blocks_w = w / 2;
    const int r = static_cast<int>(block / blocks_w * 2 + i / 2 % 2);
    const int c = static_cast<int>(block % blocks_w * 2 + i % 2);
    const int idx[4] = {tr[r].lo * side + tc[c].lo, tr[r].lo * side + tc[c].hi,
                        tr[r].hi * side + tc[c].lo, tr[r].hi * side + tc[c].hi};
    const float wt[4] = {tr[r].w_lo * tc[c].w_lo, tr[r].w_lo * tc[c].w_hi, tr[r].w_hi * tc[c].w_lo,
                         tr[r].w_hi * tc[c].w_hi};
    for (int d = 0; d < W; ++d) {
      const float p0 = table[size_t(idx[0]) * W + d] * wt[0];
      const float p1 = table[size_t(idx[1]) * W + d] * wt[1];
      const float p2 = table[size_t(idx[2]) * W + d] * wt[2];
      const float p3 = table[size_t(idx[3]) * W + d] * wt[3];
      const float pos = round_e(((p0 + p1) + p2) + p3, to_bf16);
      float& o = out[row * W + d];
      o = round_e(o + pos, to_bf16);
    }
  }
  return out;
}

// The position embedding add equals the port bit for bit, rows outside [row0, row0 + t*h*w)
// untouched; grids with interpolated (fractional) and exact (w = side) taps, several slices; the
// tower width (vec8 under Auto) and a width not a multiple of 8 (generic under Auto).
TYPED_TEST(VisionKernels, PosEmbedAdd) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  const int side = 48;
  EXPECT_STREQ(vision_pos_embed_add_variant(1152, KernelPath::Auto), "vision_pos_embed_add_vec8");
  EXPECT_STREQ(vision_pos_embed_add_variant(100, KernelPath::Auto), "vision_pos_embed_add_generic");
  struct Grid {
    int t, h, w, row0;
  };
  for (int W : {1152, 100}) {
    const auto table = rand_e<E>(rng, size_t(side) * side * W, 0.5f);
    auto dtable = to_device<E>(table);
    for (Grid g : {Grid{1, 4, 6, 3}, Grid{2, 32, 32, 17}, Grid{1, 2, 2, 1}, Grid{1, 64, 48, 5}})
      for (KernelPath path : kPaths) {
        SCOPED_TRACE("W " + std::to_string(W) + " grid (" + std::to_string(g.t) + ", " +
                     std::to_string(g.h) + ", " + std::to_string(g.w) + ") row0 " +
                     std::to_string(g.row0) + " " + vision_pos_embed_add_variant(W, path));
        const int rows = g.t * g.h * g.w, total = g.row0 + rows + 2;
        const auto x = rand_e<E>(rng, size_t(total) * W, 1.0f);
        auto dx = to_device<E>(x);
        vision_pos_embed_add<E>(dx.template get<E>(), g.row0, dtable.template get<E>(), side, g.t,
                                g.h, g.w, W, path, 0);
        const auto got = to_host<E>(dx, size_t(total) * W);
        const std::vector<float> mid(x.begin() + size_t(g.row0) * W,
                                     x.begin() + size_t(g.row0 + rows) * W);
        const auto want_mid = pos_embed_ref(table, side, g.h, g.w, W, mid, kBf16<E>);
        std::vector<float> want(x);
        std::copy(want_mid.begin(), want_mid.end(), want.begin() + size_t(g.row0) * W);
        size_t diff = 0, first = want.size();
        for (size_t i = 0; i < want.size(); ++i)
          if (!(got[i] == want[i])) diff++, first = std::min(first, i);
        EXPECT_EQ(diff, 0u) << "first at element " << first << " (row " << first / W << ")";
      }
    for (KernelPath path : kPaths)
      EXPECT_THROW(
          vision_pos_embed_add<E>(nullptr, 0, dtable.template get<E>(), side, 1, 3, 4, W, path, 0),
          std::invalid_argument);
  }
}

// The float variant on a real table: tiny-r2m's pos_embed (8 x 8 of width 32) gives exactly
// x + engine::cpu::vision_position_embedding, down- and upsampled grids, two slices.
TEST(VisionKernelsTiny, PosEmbedAddMatchesTheCpuTower) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  auto release = testing::load_golden_model("tiny-r2m");
  ASSERT_TRUE(release->vision.has_value());
  const int W = release->vision->hidden_size;
  const int side =
      static_cast<int>(std::lround(std::sqrt(release->vision->num_position_embeddings)));
  ASSERT_EQ(side * side, release->vision->num_position_embeddings);
  std::vector<float> table(size_t(side) * side * W);
  release->visual("pos_embed.weight").to_float(table.data(), 0, table.size());
  auto dtable = to_device<float>(table);
  struct Grid {
    int t, h, w, row0;
  };
  for (Grid g : {Grid{1, 4, 6, 3}, Grid{2, 8, 8, 1}, Grid{1, 2, 2, 0}, Grid{1, 16, 12, 5}}) {
    SCOPED_TRACE("grid (" + std::to_string(g.t) + ", " + std::to_string(g.h) + ", " +
                 std::to_string(g.w) + ") row0 " + std::to_string(g.row0));
    const int hw = g.h * g.w, total = g.row0 + g.t * hw + 2;
    const auto x = randn(rng, size_t(total) * W);
    const std::vector<float> pos = cpu::vision_position_embedding(*release, g.h, g.w);
    ASSERT_EQ(pos.size(), size_t(hw) * W);
    std::vector<float> want(x);
    for (int s = 0; s < g.t; ++s)
      for (size_t i = 0; i < size_t(hw) * W; ++i)
        want[(size_t(g.row0) + size_t(s) * hw) * W + i] += pos[i];
    for (KernelPath path : kPaths) {
      SCOPED_TRACE(vision_pos_embed_add_variant(W, path));
      auto dx = to_device<float>(x);
      vision_pos_embed_add<float>(dx.get<float>(), g.row0, dtable.get<float>(), side, g.t, g.h, g.w,
                                  W, path, 0);
      EXPECT_EQ(to_host<float>(dx, want.size()), want);
    }
  }
}

// The 2-D RoPE + split vs engine::cpu::apply_rope with the CPU tower's cos/sin tables (cos/sin of
// the fp32 angle in double): float within 1e-6 of the inputs' magnitude, bf16 within 1 bf16 ulp;
// v copied exactly, the padding columns zero. Shapes: the tower's (16 x 72, as it runs since
// v12b, and padded to 80 as before: the vec8 chunk of columns 32..39 straddles the half at 36), an
// odd row count, no padding with half a
// multiple of 8 (64), 3 heads of 40 padded to 48 (several rows per vec8 block, a partial last
// block), and hd 12 (not a multiple of 8: generic under Auto).
TYPED_TEST(VisionKernels, RopeSplit) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Shape {
    int rows, heads, hd, hdp;
  };
  const double theta = 10000.0;
  for (Shape sh :
       {Shape{300, 16, 72, 72}, Shape{301, 16, 72, 72}, Shape{300, 16, 72, 80},
        Shape{301, 16, 72, 80}, Shape{57, 4, 64, 64}, Shape{23, 3, 40, 48}, Shape{19, 2, 12, 16}}) {
    const int rows = sh.rows, heads = sh.heads, hd = sh.hd, hdp = sh.hdp, half = hd / 2,
              quarter = hd / 4;
    const int W = heads * hd;
    // inv_freq exactly as run_vision_tower computes it.
    std::vector<float> inv(quarter);
    for (int i = 0; i < quarter; ++i) {
      const float expo = static_cast<float>(2 * i) / static_cast<float>(half);
      inv[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(expo)));
    }
    ASSERT_EQ(vision_rope_inv_freq(hd, theta), inv);

    const auto qkv = rand_e<E>(rng, size_t(rows) * 3 * W, 1.5f);
    std::vector<int32_t> rc(size_t(rows) * 2);
    std::uniform_int_distribution<int> small(0, 63), large(0, 1000);
    for (int r = 0; r < rows; ++r) {
      auto& d = r % 4 == 3 ? large : small;  // large angles too (argument reduction)
      rc[2 * r] = d(rng), rc[2 * r + 1] = d(rng);
    }
    std::vector<float> wq(size_t(rows) * heads * hdp, 0.0f), wk(wq.size(), 0.0f),
        wv(wq.size(), 0.0f);
    std::vector<double> sq(wq.size(), 0.0), sk(wq.size(), 0.0);
    std::vector<float> cos_r(half), sin_r(half);
    for (int r = 0; r < rows; ++r) {
      for (int k = 0; k < quarter; ++k) {
        const float a_r = static_cast<float>(rc[2 * r]) * inv[k];
        const float a_c = static_cast<float>(rc[2 * r + 1]) * inv[k];
        cos_r[k] = static_cast<float>(std::cos(static_cast<double>(a_r)));
        sin_r[k] = static_cast<float>(std::sin(static_cast<double>(a_r)));
        cos_r[quarter + k] = static_cast<float>(std::cos(static_cast<double>(a_c)));
        sin_r[quarter + k] = static_cast<float>(std::sin(static_cast<double>(a_c)));
      }
      std::vector<float> row(qkv.begin() + size_t(r) * 3 * W, qkv.begin() + size_t(r + 1) * 3 * W);
      const std::vector<float> in(row);
      cpu::apply_rope(row.data(), heads, hd, hd, cos_r.data(), sin_r.data());
      cpu::apply_rope(row.data() + W, heads, hd, hd, cos_r.data(), sin_r.data());
      for (int j = 0; j < heads; ++j)
        for (int i = 0; i < hd; ++i) {
          const size_t o = (size_t(r) * heads + j) * hdp + i, s = size_t(j) * hd + i;
          const size_t p = size_t(j) * hd + (i < half ? i + half : i - half);
          wq[o] = row[s], wk[o] = row[W + s], wv[o] = row[2 * W + s];
          sq[o] = 1e-6 * (std::fabs(in[s]) + std::fabs(in[p]));
          sk[o] = 1e-6 * (std::fabs(in[W + s]) + std::fabs(in[W + p]));
        }
    }
    auto dqkv = to_device<E>(qkv);
    auto drc = ints_to_device(rc);
    auto dinv = to_device<float>(inv);
    const size_t n = wq.size();
    const VisionRopeArgs a{rows, heads, hd, hdp, drc.get<int32_t>(), dinv.get<float>()};
    EXPECT_STREQ(vision_rope_split_variant(a, KernelPath::Generic), "vision_rope_split_generic");
    EXPECT_STREQ(vision_rope_split_variant(a, KernelPath::Auto),
                 hd % 8 == 0 ? "vision_rope_split_vec8" : "vision_rope_split_generic");
    for (KernelPath path : kPaths) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " heads " + std::to_string(heads) + " hd " +
                   std::to_string(hd) + " hdp " + std::to_string(hdp) + " " +
                   vision_rope_split_variant(a, path));
      auto q = poisoned<E>(n), k = poisoned<E>(n), v = poisoned<E>(n);
      vision_rope_split<E>(dqkv.template get<E>(), q.template get<E>(), k.template get<E>(),
                           v.template get<E>(), a, path, 0);
      expect_each_near<E>(to_host<E>(q, n), wq, sq, "q");
      expect_each_near<E>(to_host<E>(k, n), wk, sk, "k");
      EXPECT_EQ(to_host<E>(v, n), wv) << "v (with zero padding) not copied exactly";
      const VisionRopeArgs bad{rows, heads, 70, 80, drc.get<int32_t>(), dinv.get<float>()};
      EXPECT_THROW(vision_rope_split<E>(dqkv.template get<E>(), q.template get<E>(),
                                        k.template get<E>(), v.template get<E>(), bad, path, 0),
                   std::invalid_argument);
    }
  }
}

// The two RoPE split variants agree bit for bit at the tower's shape (the same rounded products
// and sums, the same cos/sin), and the vec8 one writes every output (poisoned buffers).
TYPED_TEST(VisionKernels, RopeSplitVariantsAgree) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  const int rows = 4097, heads = 16, hd = 72, hdp = 80;
  const auto qkv = rand_e<E>(rng, size_t(rows) * 3 * heads * hd, 2.0f);
  const std::vector<int32_t> rc = random_rc(rng, rows);
  auto dqkv = to_device<E>(qkv);
  auto drc = ints_to_device(rc);
  auto dinv = to_device<float>(vision_rope_inv_freq(hd, 10000.0));
  const VisionRopeArgs a{rows, heads, hd, hdp, drc.get<int32_t>(), dinv.get<float>()};
  const size_t n = size_t(rows) * heads * hdp;
  std::vector<std::vector<float>> out[2];
  for (int p = 0; p < 2; ++p) {
    auto q = poisoned<E>(n), k = poisoned<E>(n), v = poisoned<E>(n);
    vision_rope_split<E>(dqkv.template get<E>(), q.template get<E>(), k.template get<E>(),
                         v.template get<E>(), a, kPaths[p], 0);
    out[p] = {to_host<E>(q, n), to_host<E>(k, n), to_host<E>(v, n)};
  }
  for (int t = 0; t < 3; ++t) {
    size_t diff = 0;
    for (size_t i = 0; i < n; ++i) diff += !(out[0][t][i] == out[1][t][i]);  // NaN counts
    EXPECT_EQ(diff, 0u) << "tensor "
                        << "qkv"[t] << ": vec8 and generic differ";
  }
}

// K and V in key tiles (attention/kv_tiles.h, for the Hopper kernel's wg64o4t): the vec8 kernel's
// tiled k and v are its row-layout k and v placed by kv_tiled_index, with zeros in every padding
// column and in the last block's rows past the end (poisoned buffers); q is the row layout's.
TYPED_TEST(VisionKernels, RopeSplitKeyTilesAreTheRowLayoutTiled) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  const int heads = 16, hd = 72;
  auto dinv = to_device<float>(vision_rope_inv_freq(hd, 10000.0));
  for (const int hdp : {72, 80})
    for (const int rows : {1, 63, 64, 65, 4097}) {
      SCOPED_TRACE(::testing::Message() << "rows " << rows << " hdp " << hdp);
      const auto qkv = rand_e<E>(rng, size_t(rows) * 3 * heads * hd, 2.0f);
      const std::vector<int32_t> rc = random_rc(rng, rows);
      auto dqkv = to_device<E>(qkv);
      auto drc = ints_to_device(rc);
      VisionRopeArgs a{rows, heads, hd, hdp, drc.get<int32_t>(), dinv.get<float>()};
      const size_t n = size_t(rows) * heads * hdp, nt = kv_tiled_elems(rows, heads, hdp);
      auto q = poisoned<E>(n), k = poisoned<E>(n), v = poisoned<E>(n);
      vision_rope_split<E>(dqkv.template get<E>(), q.template get<E>(), k.template get<E>(),
                           v.template get<E>(), a, KernelPath::Auto, 0);
      a.kv_tiled = true;
      EXPECT_TRUE(vision_rope_split_tiles_kv(a, KernelPath::Auto));
      EXPECT_FALSE(vision_rope_split_tiles_kv(a, KernelPath::Generic));
      EXPECT_STREQ(vision_rope_split_variant(a, KernelPath::Auto), "vision_rope_split_kv_tiles");
      auto tq = poisoned<E>(n), tk = poisoned<E>(nt), tv = poisoned<E>(nt);
      vision_rope_split<E>(dqkv.template get<E>(), tq.template get<E>(), tk.template get<E>(),
                           tv.template get<E>(), a, KernelPath::Auto, 0);
      EXPECT_THROW(
          vision_rope_split<E>(dqkv.template get<E>(), tq.template get<E>(), tk.template get<E>(),
                               tv.template get<E>(), a, KernelPath::Generic, 0),
          std::invalid_argument);
      const std::vector<float> hk = to_host<E>(k, n), hv = to_host<E>(v, n);
      std::vector<float> want_k(nt, 0.0f), want_v(nt, 0.0f);
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < heads; ++j)
          for (int i = 0; i < hdp; ++i) {
            const size_t from = (size_t(r) * heads + j) * hdp + i;
            want_k[kv_tiled_index(r, j, i, rows, hdp)] = hk[from];
            want_v[kv_tiled_index(r, j, i, rows, hdp)] = hv[from];
          }
      EXPECT_EQ(to_host<E>(tq, n), to_host<E>(q, n)) << "q";
      EXPECT_EQ(to_host<E>(tk, nt), want_k) << "k";
      EXPECT_EQ(to_host<E>(tv, nt), want_v) << "v";
    }
}

// Rows scattered into a wider residual stream: the listed rows' first D columns replaced, every
// other value untouched; 16-byte and scalar variants (row bytes, stride, misaligned pointers).
TYPED_TEST(VisionKernels, ScatterRows) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    int D, ld, off;  // off: destination pointer offset in elements (1 misaligns it)
  };
  for (Case c : {Case{4096, 4096, 0}, Case{4096, 4100, 0}, Case{1152, 1160, 0}, Case{13, 20, 0},
                 Case{1152, 1152, 1}})
    for (KernelPath path : kPaths) {
      SCOPED_TRACE("D=" + std::to_string(c.D) + " ld=" + std::to_string(c.ld) + " off=" +
                   std::to_string(c.off) + " " + scatter_rows_variant(c.D, c.ld, kBf16<E>, path));
      const int T = 97, n = 40;
      std::vector<int32_t> order(T);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      const std::vector<int32_t> dst_rows(order.begin(), order.begin() + n);
      const auto dst = rand_e<E>(rng, size_t(T) * c.ld + c.off);
      const auto src = rand_e<E>(rng, size_t(n) * c.D);
      std::vector<float> want(dst);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < c.D; ++j)
          want[c.off + size_t(dst_rows[i]) * c.ld + j] = src[size_t(i) * c.D + j];
      auto ddst = to_device<E>(dst), dsrc = to_device<E>(src);
      auto drows = ints_to_device(dst_rows);
      scatter_rows<E>(ddst.template get<E>() + c.off, c.ld, dsrc.template get<E>(),
                      drows.get<int32_t>(), n, c.D, path, 0);
      EXPECT_EQ(to_host<E>(ddst, dst.size()), want);
    }
}

// attn_prep with 3-D positions vs the CPU engine (attn_prep_ref without RoPE for the per-head
// norms, then mrope_tables + apply_rope) on random (temporal, height, width) positions, both
// paths; the inv_freq table is the CPU's (double pow). (p, p, p) gives the 1-D result bit for bit.
TYPED_TEST(VisionKernels, AttnPrepMultimodalRope) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Shape {
    int T, nh, nkv, hd, rd;
    std::vector<int> section;
  };
  // The Qwen3.5 layout (hd 256, rotary 64, section 11/11/10; vec8), a shorter section than
  // rd / 2 (axis 0 beyond it), and rd / 2 = 12 (generic under Auto).
  const std::vector<Shape> shapes = {Shape{61, 16, 4, 256, 64, {11, 11, 10}},
                                     Shape{40, 4, 2, 128, 32, {6, 4, 3}},
                                     Shape{30, 2, 1, 48, 24, {4, 4, 4}}};
  const double theta = 1e7;
  for (const Shape& sh : shapes) {
    SCOPED_TRACE("hd=" + std::to_string(sh.hd) + " rd=" + std::to_string(sh.rd));
    const int T = sh.T, nh = sh.nh, nkv = sh.nkv, hd = sh.hd, rd = sh.rd, half = rd / 2;
    const int ld = nh * 2 * hd + 2 * nkv * hd;
    auto proj = rand_e<E>(rng, size_t(T) * ld, 1.5f);
    auto qw = randn(rng, hd, 0.3f), kw = randn(rng, hd, 0.3f);
    round_all_bf16(qw);
    round_all_bf16(kw);
    std::vector<float> inv(half);
    for (int i = 0; i < half; ++i) {
      const float expo = static_cast<float>(2 * i) / static_cast<float>(rd);
      inv[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(expo)));
    }
    std::vector<int32_t> pos3(size_t(3) * T), flat(T), same3(size_t(3) * T);
    std::uniform_int_distribution<int> pd(0, 3000);
    for (auto& p : pos3) p = pd(rng);
    for (int t = 0; t < T; ++t) {
      flat[t] = pd(rng);
      for (int ax = 0; ax < 3; ++ax) same3[size_t(ax) * T + t] = flat[t];
    }
    const size_t nq = size_t(T) * nh * hd, nk = size_t(T) * nkv * hd;
    std::vector<float> rq(nq), rk(nk), rv(nk);
    ref::attn_prep_ref(proj.data(), T, ld, nh, nkv, hd, 0, 1e-6f, inv.data(), qw.data(), kw.data(),
                       kBf16<E>, rq.data(), rk.data(), rv.data());
    std::vector<float> cos_t, sin_t;
    cpu::mrope_tables(T, rd, theta, sh.section, pos3.data(), cos_t, sin_t);
    for (int t = 0; t < T; ++t) {
      const float* cr = cos_t.data() + size_t(t) * half;
      const float* sr = sin_t.data() + size_t(t) * half;
      cpu::apply_rope(rq.data() + size_t(t) * nh * hd, nh, hd, rd, cr, sr);
      cpu::apply_rope(rk.data() + size_t(t) * nkv * hd, nkv, hd, rd, cr, sr);
    }
    auto dp = to_device<E>(proj);
    auto dqw = to_device<float>(qw), dkw = to_device<float>(kw), dinv = to_device<float>(inv);
    auto dpos3 = ints_to_device(pos3), dflat = ints_to_device(flat), dsame = ints_to_device(same3);
    for (KernelPath path : {KernelPath::Auto, KernelPath::Generic}) {
      auto run = [&](const int32_t* positions, const int32_t* mrope) {
        AttnPrepArgs a{T, ld, nh, nkv, hd, rd, 1e-6f, dinv.template get<float>(), positions};
        a.mrope_positions = mrope;
        for (int ax = 0; ax < 3; ++ax) a.mrope_section[ax] = sh.section[ax];
        SCOPED_TRACE(attn_prep_variant(a, path));
        auto q = poisoned<E>(nq), k = poisoned<E>(nk), v = poisoned<E>(nk);
        attn_prep<E>(dp.template get<E>(), dqw.template get<float>(), dkw.template get<float>(), a,
                     q.template get<E>(), k.template get<E>(), v.template get<E>(), path, 0);
        return std::vector<std::vector<float>>{to_host<E>(q, nq), to_host<E>(k, nk),
                                               to_host<E>(v, nk)};
      };
      SCOPED_TRACE(kernel_path_name(path));
      const auto got = run(nullptr, dpos3.get<int32_t>());
      // bf16: the kernel rounds cos/sin and both products to bf16 (as the reference's bf16 run).
      const double tol = kBf16<E> ? 4e-3 : 2e-6;
      CLEF_EXPECT_CLOSE(got[0], rq, tol);
      CLEF_EXPECT_CLOSE(got[1], rk, tol);
      CLEF_EXPECT_CLOSE(got[2], rv, 0.0);
      EXPECT_EQ(run(nullptr, dsame.get<int32_t>()), run(dflat.get<int32_t>(), nullptr))
          << "3-D positions (p, p, p) differ from the 1-D positions p";
    }
  }
}

}  // namespace
}  // namespace clef

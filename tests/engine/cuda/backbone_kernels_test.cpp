// Every backbone kernel (engine/cuda/kernels/*.h, gdn/gdn.h, gemm/gemm.h) against its CPU reference
// (clef_engine_ref: support/ref/*_ref.h) on fresh random inputs, outputs NaN-poisoned first, in
// both storage types (float = parity, bf16 = production with the reference's rounding points) and
// both kernel paths (KernelPath::Auto = production, KernelPath::Generic = the generic kernels and
// the SIMT GDN). The shapes reach both variants of every kernel under Auto: the vec8 variant (the
// GDN prep's: tile; aligned pointers, widths and strides multiples of 8 elements) and the generic
// fallback (odd widths/strides, pointers one element off 16 bytes), plus the flash shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/cuda/attention/kv_tiles.h"
#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/gdn/tensor_core.h"
#include "engine/cuda/gdn_test_inputs.h"
#include "engine/cuda/gemm/gemm.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/attn_prep.h"
#include "engine/cuda/kernels/elementwise.h"
#include "engine/cuda/kernels/gdn_prep.h"
#include "engine/cuda/kernels/norm.h"
#include "engine/cuda/packing.h"
#include "support/ref/backbone_ref.h"
#include "support/ref/gemm_ref.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using namespace clef::gputest;
namespace ref = clef::engine::ref;
using bf16 = __nv_bfloat16;

constexpr KernelPath kPaths[] = {KernelPath::Auto, KernelPath::Generic};

template <typename E>
constexpr bool kBf16 = std::is_same_v<E, bf16>;
template <typename E>
constexpr double kTol = kBf16<E> ? 4e-3 : 2e-6;

template <typename E>
std::vector<float> rand_e(std::mt19937_64& rng, size_t n, float scale = 1.0f, float mean = 0.0f) {
  auto v = randn(rng, n, scale, mean);
  if (kBf16<E>) round_all_bf16(v);
  return v;
}

// v without its first `off` elements (device buffers offset by `off` elements to misalign them).
std::vector<float> drop_front(std::vector<float> v, size_t off) {
  v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(off));
  return v;
}

template <typename E>
class BackboneKernels : public ::testing::Test {};
using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(BackboneKernels, Types);

TYPED_TEST(BackboneKernels, EmbedGather) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    int D, out_off;  // out_off: output pointer offset in elements (1 misaligns it)
  };
  // 130: scalar (row bytes not a multiple of 16), 136 and 4096: vector, 136 + offset: scalar.
  for (Case c : {Case{130, 0}, Case{136, 0}, Case{136, 1}, Case{4096, 0}}) {
    SCOPED_TRACE("D=" + std::to_string(c.D) + " off=" + std::to_string(c.out_off));
    const int V = 97, D = c.D, T = 41;
    auto table = rand_e<E>(rng, size_t(V) * D);
    std::vector<int32_t> ids(T);
    std::uniform_int_distribution<int> id(0, V - 1);
    for (auto& x : ids) x = id(rng);
    auto dt = to_device<E>(table);
    DeviceBuffer di(T * 4);
    CLEF_CUDA_CHECK(cudaMemcpy(di.get(), ids.data(), T * 4, cudaMemcpyHostToDevice));
    std::vector<float> ref(size_t(T) * D);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < D; ++i) ref[size_t(t) * D + i] = table[size_t(ids[t]) * D + i];
    for (KernelPath path : kPaths) {
      SCOPED_TRACE(kernel_path_name(path));
      auto out = poisoned<E>(c.out_off + size_t(T) * D);
      embed_gather<E>(dt.template get<E>(), di.template get<int32_t>(),
                      out.template get<E>() + c.out_off, T, D, path, 0);
      CLEF_EXPECT_CLOSE(drop_front(to_host<E>(out, c.out_off + ref.size()), c.out_off), ref, 0.0);
    }
  }
}

TYPED_TEST(BackboneKernels, RmsNorm1p) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    int rows, D, ldx, ldo, x_off;  // x_off: input pointer offset in elements
  };
  // vector: 64, 4096 (flash), 8, strided 4096, 32768 (the largest vector row); scalar: 300 (odd
  // width), 512 with ldx 513, 512 with a misaligned x, 32776 (above the vector path's limit).
  for (Case c : {Case{37, 64, 64, 64, 0}, Case{37, 300, 300, 300, 0}, Case{37, 4096, 4096, 4096, 0},
                 Case{9, 8, 8, 8, 0}, Case{11, 4096, 4104, 4112, 0}, Case{13, 512, 513, 512, 0},
                 Case{13, 512, 512, 520, 1}, Case{3, 32768, 32768, 32768, 0},
                 Case{3, 32776, 32776, 32776, 0}}) {
    SCOPED_TRACE("D=" + std::to_string(c.D) + " ldx=" + std::to_string(c.ldx) +
                 " ldo=" + std::to_string(c.ldo) + " off=" + std::to_string(c.x_off));
    const int rows = c.rows, D = c.D;
    auto xs = rand_e<E>(rng, c.x_off + size_t(rows) * c.ldx, 3.0f);
    std::vector<float> x(size_t(rows) * D);
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < D; ++i) x[size_t(r) * D + i] = xs[c.x_off + size_t(r) * c.ldx + i];
    auto w = randn(rng, D, 0.3f);
    round_all_bf16(w);
    auto dx = to_device<E>(xs);
    auto dw = to_device<float>(w);
    std::vector<float> ref(x.size());
    ref::rms_norm_1p_ref(x.data(), w.data(), ref.data(), rows, D, 1e-6f, kBf16<E>);
    for (KernelPath path : kPaths) {
      SCOPED_TRACE(kernel_path_name(path));
      auto out = poisoned<E>(size_t(rows) * c.ldo);
      rms_norm_1p<E>(dx.template get<E>() + c.x_off, c.ldx, dw.template get<float>(),
                     out.template get<E>(), c.ldo, rows, D, 1e-6f, path, 0);
      const auto got_ld = to_host<E>(out, size_t(rows) * c.ldo);
      std::vector<float> got(x.size());
      for (int r = 0; r < rows; ++r)
        for (int i = 0; i < D; ++i) got[size_t(r) * D + i] = got_ld[size_t(r) * c.ldo + i];
      CLEF_EXPECT_CLOSE(got, ref, kTol<E>);
    }
  }
}

// The GDN prep tests' shapes (extra columns: ld != used width). extra 3 -> ld not a multiple of 8:
// scalar path. The others take the tile path with dk / 8 = 2, 4, 1, 32 and 16 lanes per head
// (4 tokens per block at these T); T = 2 < K - 1 (zero history only, fewer tokens than a block).
// The flash shape at the tile variant's block sizes (bf16; fp32 storage takes at most 8): 4097
// tokens, 16 per block (the last block 1 token); 1000, 16 per block (the last block 8: two of its
// four groups); 500, 12 per block (the last 8: two of three groups); 363, 8 per block (the last 3:
// part of a group); 100, 4 per block.
struct ConvPrepShape {
  int T, Hk, Hv, dk, dv, extra;
};
constexpr ConvPrepShape kConvPrepShapes[] = {
    {70, 2, 4, 16, 16, 3},       {33, 2, 6, 32, 48, 3},      {100, 16, 32, 128, 128, 3},
    {70, 2, 4, 16, 16, 0},       {33, 2, 6, 32, 48, 4},      {2, 2, 4, 16, 16, 0},
    {20, 3, 3, 8, 8, 2},         {40, 2, 2, 256, 64, 4},     {4097, 16, 32, 128, 128, 0},
    {1000, 16, 32, 128, 128, 0}, {500, 16, 32, 128, 128, 0}, {363, 16, 32, 128, 128, 0},
    {100, 16, 32, 128, 128, 0}};

// gdn_conv_prep's fp32-form outputs q, k, v, g, beta on `path` (into poisoned buffers), on the
// host.
template <typename E>
std::array<std::vector<float>, 5> run_conv_prep(const DeviceBuffer& dp, const DeviceBuffer& dc,
                                                const DeviceBuffer& da, const DeviceBuffer& db,
                                                const GdnPrepArgs& a, KernelPath path) {
  const size_t nq = size_t(a.T) * a.Hk * a.dk, nv = size_t(a.T) * a.Hv * a.dv,
               ng = size_t(a.T) * a.Hv;
  auto q = poisoned<float>(nq), k = poisoned<float>(nq), v = poisoned<float>(nv),
       g = poisoned<float>(ng), beta = poisoned<float>(ng);
  gdn_conv_prep<E>(dp.get<E>(), dc.get<E>(), da.get<float>(), db.get<float>(), a, q.get<float>(),
                   k.get<float>(), v.get<float>(), g.get<float>(), beta.get<float>(), path, 0);
  return {to_host<float>(q, nq), to_host<float>(k, nq), to_host<float>(v, nv),
          to_host<float>(g, ng), to_host<float>(beta, ng)};
}

TYPED_TEST(BackboneKernels, GdnConvPrep) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  for (const ConvPrepShape& sh : kConvPrepShapes) {
    SCOPED_TRACE("T=" + std::to_string(sh.T) + " dk=" + std::to_string(sh.dk) +
                 " dv=" + std::to_string(sh.dv) + " extra=" + std::to_string(sh.extra));
    const int K = 4, cqkv = 2 * sh.Hk * sh.dk + sh.Hv * sh.dv;
    const int ld = cqkv + sh.Hv * sh.dv + 2 * sh.Hv + sh.extra;
    const int b_off = cqkv + sh.Hv * sh.dv, a_off = b_off + sh.Hv;
    auto proj = rand_e<E>(rng, size_t(sh.T) * ld, 1.0f);
    auto conv = rand_e<E>(rng, size_t(cqkv) * K, 0.5f);
    auto A_log = randu(rng, sh.Hv, 0.0f, 2.7f);
    auto dtb = randn(rng, sh.Hv, 1.0f, 1.0f);
    round_all_bf16(A_log);
    round_all_bf16(dtb);
    auto dp = to_device<E>(proj);
    auto dc = to_device<E>(conv);
    auto da = to_device<float>(A_log), db = to_device<float>(dtb);
    const size_t nq = size_t(sh.T) * sh.Hk * sh.dk, nv = size_t(sh.T) * sh.Hv * sh.dv,
                 ng = size_t(sh.T) * sh.Hv;
    GdnPrepArgs a{sh.T, ld, sh.Hk, sh.Hv, sh.dk, sh.dv, K, b_off, a_off};
    std::vector<float> rq(nq), rk(nq), rv(nv), rg(ng), rb(ng);
    ref::gdn_conv_prep_ref(proj.data(), sh.T, ld, sh.Hk, sh.Hv, sh.dk, sh.dv, K, b_off, a_off,
                           conv.data(), A_log.data(), dtb.data(), kBf16<E>, rq.data(), rk.data(),
                           rv.data(), rg.data(), rb.data());
    for (KernelPath path : kPaths) {
      SCOPED_TRACE(gdn_conv_prep_variant(a, path));
      const auto got = run_conv_prep<E>(dp, dc, da, db, a, path);
      CLEF_EXPECT_CLOSE(got[0], rq, kTol<E>);
      CLEF_EXPECT_CLOSE(got[1], rk, kTol<E>);
      CLEF_EXPECT_CLOSE(got[2], rv, kTol<E>);
      CLEF_EXPECT_CLOSE(got[3], rg, 1e-5);
      CLEF_EXPECT_CLOSE(got[4], rb, kTol<E>);
    }
  }
}

TYPED_TEST(BackboneKernels, GatedRmsNorm) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    int T, H, dv, ldz;
  };
  // vector: dv 128 (16 lanes per head), 48 (8 lanes, 2 idle), 256 (32), 8 (1), the flash z stride;
  // scalar: odd ldz, dv 100, dv 384 (above 256).
  for (Case c : {Case{29, 6, 128, 6 * 128 + 40}, Case{29, 6, 128, 6 * 128 + 41},
                 Case{17, 5, 48, 5 * 48 + 8}, Case{13, 3, 256, 3 * 256}, Case{9, 4, 8, 40},
                 Case{300, 32, 128, 12352}, Case{11, 4, 100, 400}, Case{7, 3, 384, 3 * 384}}) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) +
                 " dv=" + std::to_string(c.dv) + " ldz=" + std::to_string(c.ldz));
    const int T = c.T, H = c.H, dv = c.dv, ldz = c.ldz;
    auto o = rand_e<E>(rng, size_t(T) * H * dv, 0.2f);
    auto z = rand_e<E>(rng, size_t(T) * ldz, 2.0f);
    auto w = randn(rng, dv, 0.5f, 1.0f);
    round_all_bf16(w);
    auto d_o = to_device<E>(o), dz = to_device<E>(z);
    auto dw = to_device<float>(w);
    std::vector<float> ref(o.size());
    ref::gated_rms_norm_ref(o.data(), z.data(), ldz, w.data(), ref.data(), T, H, dv, 1e-6f,
                            kBf16<E>);
    for (KernelPath path : kPaths) {
      SCOPED_TRACE(gated_rms_norm_variant(ldz, dv, path));
      auto y = poisoned<E>(o.size());
      gated_rms_norm<E>(d_o.template get<E>(), dz.template get<E>(), ldz, dw.template get<float>(),
                        y.template get<E>(), T, H, dv, 1e-6f, path, 0);
      CLEF_EXPECT_CLOSE(to_host<E>(y, ref.size()), ref, kTol<E>);
    }
  }
}

TYPED_TEST(BackboneKernels, AttnPrepAndOutputGate) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Shape {
    int T, nh, nkv, hd, rd, extra;  // extra columns of proj
  };
  // attn_prep vector path: hd 256 (flash, rd 64), 128 (16 of 32 lanes), 64 with full rotary, 40
  // with rd 0, and 1 + 2 x 1 heads (a block's 8 items span 4 rows: its shared cos/sin table's
  // most); scalar: rd / 2 not a multiple of 8 (32/8, 24/6), odd ld. attn_output_gate takes the
  // vector path except for the odd ld.
  for (Shape sh :
       {Shape{50, 4, 2, 32, 8, 0}, Shape{300, 16, 4, 256, 64, 0}, Shape{40, 4, 2, 128, 32, 0},
        Shape{30, 3, 1, 64, 64, 0}, Shape{16, 2, 1, 40, 0, 0}, Shape{20, 2, 2, 24, 6, 0},
        Shape{25, 2, 1, 64, 16, 3}, Shape{37, 1, 1, 64, 32, 0}}) {
    SCOPED_TRACE("T=" + std::to_string(sh.T) + " hd=" + std::to_string(sh.hd) +
                 " rd=" + std::to_string(sh.rd) + " extra=" + std::to_string(sh.extra));
    const int rd = sh.rd, ld = sh.nh * 2 * sh.hd + 2 * sh.nkv * sh.hd + sh.extra;
    auto proj = rand_e<E>(rng, size_t(sh.T) * ld, 1.5f);
    auto qw = randn(rng, sh.hd, 0.3f), kw = randn(rng, sh.hd, 0.3f);
    round_all_bf16(qw);
    round_all_bf16(kw);
    const auto inv = rope_inv_freq(rd, 1e7);
    auto dp = to_device<E>(proj);
    auto dqw = to_device<float>(qw), dkw = to_device<float>(kw), dinv = to_device<float>(inv);
    const size_t nq = size_t(sh.T) * sh.nh * sh.hd, nk = size_t(sh.T) * sh.nkv * sh.hd;
    AttnPrepArgs a{sh.T, ld, sh.nh, sh.nkv, sh.hd, rd, 1e-6f, dinv.template get<float>()};
    std::vector<float> rq(nq), rk(nk), rv(nk);
    ref::attn_prep_ref(proj.data(), sh.T, ld, sh.nh, sh.nkv, sh.hd, rd, 1e-6f, inv.data(),
                       qw.data(), kw.data(), kBf16<E>, rq.data(), rk.data(), rv.data());
    const auto attn = rand_e<E>(rng, nq);
    std::vector<float> gated(attn);
    ref::attn_output_gate_ref(gated.data(), proj.data(), ld, sh.T, sh.nh, sh.hd, kBf16<E>);
    for (KernelPath path : kPaths) {
      SCOPED_TRACE(std::string(attn_prep_variant(a, path)) + " " +
                   attn_output_gate_variant(ld, sh.hd, path));
      auto q = poisoned<E>(nq), k = poisoned<E>(nk), v = poisoned<E>(nk);
      attn_prep<E>(dp.template get<E>(), dqw.template get<float>(), dkw.template get<float>(), a,
                   q.template get<E>(), k.template get<E>(), v.template get<E>(), path, 0);
      CLEF_EXPECT_CLOSE(to_host<E>(q, nq), rq, kTol<E>);
      CLEF_EXPECT_CLOSE(to_host<E>(k, nk), rk, kTol<E>);
      CLEF_EXPECT_CLOSE(to_host<E>(v, nk), rv, 0.0);

      auto dattn = to_device<E>(attn);
      // The same values one element further (misaligned: generic variant) must give identical
      // bits.
      std::vector<float> attn1(nq + 1, 0.0f);
      std::copy(attn.begin(), attn.end(), attn1.begin() + 1);
      auto dattn1 = to_device<E>(attn1);
      attn_output_gate<E>(dattn.template get<E>(), dp.template get<E>(), ld, sh.T, sh.nh, sh.hd,
                          path, 0);
      attn_output_gate<E>(dattn1.template get<E>() + 1, dp.template get<E>(), ld, sh.T, sh.nh,
                          sh.hd, path, 0);
      const auto got = to_host<E>(dattn, nq);
      CLEF_EXPECT_CLOSE(got, gated, kTol<E>);
      CLEF_EXPECT_CLOSE(drop_front(to_host<E>(dattn1, nq + 1), 1), got, 0.0);  // exact
    }
  }
}

// attn_prep with kv_tiled (the backbone's K and V for wg64te): on both paths, every K and V value
// is the row layout's (the same call without kv_tiled), bit for bit, at kv_tiled_index; the rows of
// the last key tile past T are zeros (NaN-poisoned buffers first); q is unchanged. T around the
// 64-row tiles; hd 256 (the flash shape), 128 and 64; a head dim that is not a multiple of 16 is
// refused.
TYPED_TEST(BackboneKernels, AttnPrepWritesKeyTiles) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Shape {
    int T, nh, nkv, hd, rd;
  };
  for (Shape sh : {Shape{300, 16, 4, 256, 64}, Shape{64, 16, 4, 256, 64}, Shape{1, 4, 1, 256, 64},
                   Shape{65, 8, 2, 128, 32}, Shape{130, 4, 2, 64, 64}}) {
    SCOPED_TRACE("T=" + std::to_string(sh.T) + " hd=" + std::to_string(sh.hd));
    const int ld = sh.nh * 2 * sh.hd + 2 * sh.nkv * sh.hd;
    auto dp = to_device<E>(rand_e<E>(rng, size_t(sh.T) * ld, 1.5f));
    auto qw = randn(rng, sh.hd, 0.3f), kw = randn(rng, sh.hd, 0.3f);
    auto dqw = to_device<float>(qw), dkw = to_device<float>(kw);
    auto dinv = to_device<float>(rope_inv_freq(sh.rd, 1e7));
    const size_t nq = size_t(sh.T) * sh.nh * sh.hd, nk = size_t(sh.T) * sh.nkv * sh.hd;
    const size_t nt = kv_tiled_elems(sh.T, sh.nkv, sh.hd);
    // Values of the row layout's T rows that differ from the tiled tensor's at at(t, h, c), bit for
    // bit (per tensor: k, then v).
    auto misplaced = [&](const std::vector<float>& rows, const std::vector<float>& tiles, auto at) {
      size_t n = 0;
      for (int t = 0; t < sh.T; ++t)
        for (int h = 0; h < sh.nkv; ++h)
          for (int c = 0; c < sh.hd; ++c)
            n += std::memcmp(&tiles[at(t, h, c)], &rows[(size_t(t) * sh.nkv + h) * sh.hd + c],
                             sizeof(float)) != 0;
      return n;
    };
    for (KernelPath path : kPaths) {
      // attn_prep of this shape's operands into q, k and v
      auto prep = [&](const AttnPrepArgs& args, DeviceBuffer& q, DeviceBuffer& k, DeviceBuffer& v) {
        attn_prep<E>(dp.template get<E>(), dqw.template get<float>(), dkw.template get<float>(),
                     args, q.template get<E>(), k.template get<E>(), v.template get<E>(), path, 0);
      };
      AttnPrepArgs a{sh.T, ld, sh.nh, sh.nkv, sh.hd, sh.rd, 1e-6f, dinv.template get<float>()};
      auto q = poisoned<E>(nq), k = poisoned<E>(nk), v = poisoned<E>(nk);
      prep(a, q, k, v);
      a.kv_tiled = true;
      SCOPED_TRACE(attn_prep_variant(a, path));
      auto qt = poisoned<E>(nq), kt = poisoned<E>(nt), vt = poisoned<E>(nt);
      prep(a, qt, kt, vt);
      CLEF_EXPECT_CLOSE(to_host<E>(qt, nq), to_host<E>(q, nq), 0.0);
      for (int which = 0; which < 2; ++which) {
        SCOPED_TRACE(which ? "v" : "k");
        const auto rows = to_host<E>(which ? v : k, nk);
        const auto tiles = to_host<E>(which ? vt : kt, nt);
        size_t nonzero_pad = 0, seen = size_t(sh.T) * sh.nkv * sh.hd;
        for (int t = sh.T; t < kv_tile_blocks(sh.T) * kKvTileRows; ++t)
          for (int h = 0; h < sh.nkv; ++h)
            for (int c = 0; c < sh.hd; ++c, ++seen)
              nonzero_pad += !(tiles[kv_tiled_index(t, h, c, sh.T, sh.hd)] == 0.0f);
        EXPECT_EQ(seen, nt) << "every tiled element visited";
        EXPECT_EQ(
            misplaced(rows, tiles,
                      [&](int t, int h, int c) { return kv_tiled_index(t, h, c, sh.T, sh.hd); }),
            0u);
        EXPECT_EQ(nonzero_pad, 0u) << "rows past T must be zeros";
      }
      // Per-sequence key tiles (a packed forward): the T rows as three sequences (or fewer), each
      // row's K and V at its kv_rows entry, equal to the row layout's under the same positions.
      std::vector<int> lens = {sh.T};
      if (sh.T >= 3) lens = {sh.T / 3, 1, sh.T - sh.T / 3 - 1};
      const int S = static_cast<int>(lens.size());
      const PackTables pt = pack_tables(lens, sh.T, S, 64);
      auto dpos = to_device_ints(pt.positions), dkvr = to_device_ints(pt.kv_rows);
      AttnPrepArgs pr{sh.T,
                      ld,
                      sh.nh,
                      sh.nkv,
                      sh.hd,
                      sh.rd,
                      1e-6f,
                      dinv.template get<float>(),
                      dpos.template get<int32_t>()};
      auto k2 = poisoned<E>(nk), v2 = poisoned<E>(nk), q2 = poisoned<E>(nq);
      prep(pr, q2, k2, v2);
      pr.kv_tiled = true;
      pr.kv_rows = dkvr.template get<int32_t>();
      pr.kv_head_blocks = kv_head_blocks(sh.T, S);
      const size_t ns = kv_tiled_elems(sh.T, sh.nkv, sh.hd, S);
      auto ks = poisoned<E>(ns), vs = poisoned<E>(ns);
      prep(pr, qt, ks, vs);
      CLEF_EXPECT_CLOSE(to_host<E>(qt, nq), to_host<E>(q2, nq), 0.0);
      for (int which = 0; which < 2; ++which) {
        SCOPED_TRACE(which ? "v, per-sequence tiles" : "k, per-sequence tiles");
        const auto rows = to_host<E>(which ? v2 : k2, nk);
        const auto tiles = to_host<E>(which ? vs : ks, ns);
        EXPECT_EQ(misplaced(rows, tiles,
                            [&](int t, int h, int c) {
                              return kv_tiled_at(pt.kv_rows[t], h, c, pr.kv_head_blocks, sh.hd);
                            }),
                  0u);
      }
    }
  }
  AttnPrepArgs bad{4, 2 * 2 * 40 + 2 * 40, 2, 1, 40, 0, 1e-6f, nullptr};
  bad.kv_tiled = true;
  EXPECT_THROW(
      attn_prep<E>(nullptr, nullptr, nullptr, bad, nullptr, nullptr, nullptr, KernelPath::Auto, 0),
      std::invalid_argument);
}

// The packed tests' sequences (by default lengths 37, 2, 58, 19: 2 tokens < K - 1, then across
// the vector kernels' blocks): each row's position in its sequence, and 0..T-1, on the device too.
struct PackedPositions {
  std::vector<int> lens;
  std::vector<int32_t> pos;
  int T;
  engine::cuda::DeviceBuffer dpos, diota;
};
PackedPositions packed_positions(std::vector<int> lens = {37, 2, 58, 19}) {
  PackedPositions p{std::move(lens), {}, 0, {}, {}};
  for (int L : p.lens)
    for (int i = 0; i < L; ++i) p.pos.push_back(i);
  p.T = static_cast<int>(p.pos.size());
  std::vector<int32_t> iota(p.pos.size());
  for (int t = 0; t < p.T; ++t) iota[t] = t;
  p.dpos = engine::cuda::DeviceBuffer(p.pos.size() * 4);
  p.diota = engine::cuda::DeviceBuffer(iota.size() * 4);
  CLEF_CUDA_CHECK(cudaMemcpy(p.dpos.get(), p.pos.data(), p.pos.size() * 4, cudaMemcpyHostToDevice));
  CLEF_CUDA_CHECK(cudaMemcpy(p.diota.get(), iota.data(), iota.size() * 4, cudaMemcpyHostToDevice));
  return p;
}

// The GDN prep part of PackedSequencesRestartConvTapsAndRope on pp's sequences and one shape
// (extra columns: ld != used width).
template <typename E>
void expect_packed_gdn_prep(std::mt19937_64& rng, const PackedPositions& pp, int Hk, int Hv, int dk,
                            int dv, int extra) {
  SCOPED_TRACE("gdn prep, T " + std::to_string(pp.T) + ", dk " + std::to_string(dk) + ", extra " +
               std::to_string(extra));
  const std::vector<int>& lens = pp.lens;
  const std::vector<int32_t>& pos = pp.pos;
  const int T = pp.T;
  const engine::cuda::DeviceBuffer &dpos = pp.dpos, &diota = pp.diota;
  const int K = 4, cqkv = 2 * Hk * dk + Hv * dv;
  const int ld = cqkv + Hv * dv + 2 * Hv + extra, b_off = cqkv + Hv * dv, a_off = b_off + Hv;
  auto proj = rand_e<E>(rng, size_t(T) * ld, 1.0f);
  auto conv = rand_e<E>(rng, size_t(cqkv) * K, 0.5f);
  auto A_log = randu(rng, Hv, 0.0f, 2.7f), dtb = randn(rng, Hv, 1.0f, 1.0f);
  round_all_bf16(A_log);
  round_all_bf16(dtb);
  const size_t nq = size_t(T) * Hk * dk, nv = size_t(T) * Hv * dv, ng = size_t(T) * Hv;
  std::vector<float> rq(nq), rk(nq), rv(nv), rg(ng), rb(ng);
  ref::gdn_conv_prep_ref(proj.data(), T, ld, Hk, Hv, dk, dv, K, b_off, a_off, conv.data(),
                         A_log.data(), dtb.data(), kBf16<E>, rq.data(), rk.data(), rv.data(),
                         rg.data(), rb.data(), pos.data());
  // The reference, packed, equals the reference on each sequence alone.
  for (size_t si = 0, t0 = 0; si < lens.size(); t0 += lens[si++]) {
    const int L = lens[si];
    std::vector<float> q1(size_t(L) * Hk * dk), k1(q1.size()), v1(size_t(L) * Hv * dv),
        g1(size_t(L) * Hv), b1(g1.size());
    ref::gdn_conv_prep_ref(proj.data() + t0 * ld, L, ld, Hk, Hv, dk, dv, K, b_off, a_off,
                           conv.data(), A_log.data(), dtb.data(), kBf16<E>, q1.data(), k1.data(),
                           v1.data(), g1.data(), b1.data());
    ASSERT_TRUE(std::equal(q1.begin(), q1.end(), rq.begin() + t0 * Hk * dk)) << "sequence " << si;
    ASSERT_TRUE(std::equal(v1.begin(), v1.end(), rv.begin() + t0 * Hv * dv)) << "sequence " << si;
  }
  auto dp = to_device<E>(proj), dc = to_device<E>(conv);
  auto da = to_device<float>(A_log), db = to_device<float>(dtb);
  for (KernelPath path : kPaths) {
    auto run = [&](const int32_t* positions) {
      return run_conv_prep<E>(dp, dc, da, db,
                              GdnPrepArgs{T, ld, Hk, Hv, dk, dv, K, b_off, a_off, positions}, path);
    };
    SCOPED_TRACE(gdn_conv_prep_variant(GdnPrepArgs{T, ld, Hk, Hv, dk, dv, K, b_off, a_off}, path));
    const auto packed = run(dpos.get<int32_t>());
    CLEF_EXPECT_CLOSE(packed[0], rq, kTol<E>);
    CLEF_EXPECT_CLOSE(packed[1], rk, kTol<E>);
    CLEF_EXPECT_CLOSE(packed[2], rv, kTol<E>);
    CLEF_EXPECT_CLOSE(packed[4], rb, kTol<E>);
    EXPECT_EQ(run(diota.get<int32_t>()), run(nullptr)) << "explicit 0..T-1 differs from none";
  }
}

// Packed sequences: with each row's position in its sequence given, the conv taps of the GDN prep
// never reach into the previous sequence and RoPE restarts at 0, i.e. a packed run equals each
// sequence run alone (checked on the references first), the kernels match the references on both
// paths, and explicit positions 0..T-1 give the same bits as none.
TYPED_TEST(BackboneKernels, PackedSequencesRestartConvTapsAndRope) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  const PackedPositions pp = packed_positions();
  const std::vector<int>& lens = pp.lens;
  const std::vector<int32_t>& pos = pp.pos;
  const int T = pp.T;
  const engine::cuda::DeviceBuffer &dpos = pp.dpos, &diota = pp.diota;

  // The small shape on the tile (extra 0) and generic (extra 3) GDN prep; the flash shape on longer
  // sequences, where the tile variant takes 16 tokens per block (8 in fp32 storage): sequences of
  // 1..4 tokens, starts inside groups of 4 and on a block boundary (token 64), a long last one.
  expect_packed_gdn_prep<E>(rng, pp, 2, 4, 16, 16, 0);
  expect_packed_gdn_prep<E>(rng, pp, 2, 4, 16, 16, 3);
  expect_packed_gdn_prep<E>(rng, packed_positions({1, 2, 3, 4, 13, 16, 17, 8, 936}), 16, 32, 128,
                            128, 0);

  {
    SCOPED_TRACE("attention prep");
    const int nh = 4, nkv = 2, hd = 128, rd = 32, ld = nh * 2 * hd + 2 * nkv * hd;
    auto proj = rand_e<E>(rng, size_t(T) * ld, 1.5f);
    auto qw = randn(rng, hd, 0.3f), kw = randn(rng, hd, 0.3f);
    round_all_bf16(qw);
    round_all_bf16(kw);
    const auto inv = rope_inv_freq(rd, 1e7);
    const size_t nq = size_t(T) * nh * hd, nk = size_t(T) * nkv * hd;
    std::vector<float> rq(nq), rk(nk), rv(nk);
    ref::attn_prep_ref(proj.data(), T, ld, nh, nkv, hd, rd, 1e-6f, inv.data(), qw.data(), kw.data(),
                       kBf16<E>, rq.data(), rk.data(), rv.data(), pos.data());
    for (size_t si = 0, t0 = 0; si < lens.size(); t0 += lens[si++]) {
      const int L = lens[si];
      std::vector<float> q1(size_t(L) * nh * hd), k1(size_t(L) * nkv * hd), v1(k1.size());
      ref::attn_prep_ref(proj.data() + t0 * ld, L, ld, nh, nkv, hd, rd, 1e-6f, inv.data(),
                         qw.data(), kw.data(), kBf16<E>, q1.data(), k1.data(), v1.data());
      ASSERT_TRUE(std::equal(q1.begin(), q1.end(), rq.begin() + t0 * nh * hd)) << "sequence " << si;
      ASSERT_TRUE(std::equal(k1.begin(), k1.end(), rk.begin() + t0 * nkv * hd))
          << "sequence " << si;
    }
    auto dp = to_device<E>(proj);
    auto dqw = to_device<float>(qw), dkw = to_device<float>(kw), dinv = to_device<float>(inv);
    for (KernelPath path : kPaths) {
      auto run = [&](const int32_t* positions) {
        AttnPrepArgs a{T, ld, nh, nkv, hd, rd, 1e-6f, dinv.template get<float>(), positions};
        auto q = poisoned<E>(nq), k = poisoned<E>(nk), v = poisoned<E>(nk);
        attn_prep<E>(dp.template get<E>(), dqw.template get<float>(), dkw.template get<float>(), a,
                     q.template get<E>(), k.template get<E>(), v.template get<E>(), path, 0);
        return std::vector<std::vector<float>>{to_host<E>(q, nq), to_host<E>(k, nk)};
      };
      const auto packed = run(dpos.get<int32_t>());
      CLEF_EXPECT_CLOSE(packed[0], rq, kTol<E>);
      CLEF_EXPECT_CLOSE(packed[1], rk, kTol<E>);
      EXPECT_EQ(run(diota.get<int32_t>()), run(nullptr)) << "explicit 0..T-1 differs from none";
    }
  }
}

// got (bf16 values) against round_bf16(s), s the reference's fp32 value before its last rounding:
// equal bit for bit, except that where s lies within 2^-19 (relative) of a rounding boundary the
// other neighbour is accepted too (the device's expf may differ from the host's by a few fp32
// ulps, about 2^-21, which moves such a value across it). Expects no other difference (unwritten
// NaN outputs included).
void expect_bf16_rounding_of(const std::vector<float>& got, const std::vector<float>& s,
                             const char* what) {
  ASSERT_EQ(got.size(), s.size());
  size_t bad = 0, near_tie = 0, first = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (got[i] == ref::round_bf16(s[i])) continue;
    const float lo = ref::round_bf16(s[i] * (1.0f - 0x1p-19f)),
                hi = ref::round_bf16(s[i] * (1.0f + 0x1p-19f));
    if (lo != hi && (got[i] == lo || got[i] == hi)) {
      ++near_tie;
    } else if (bad++ == 0) {
      first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": first at " << first << ": got " << got[first] << ", want "
                     << ref::round_bf16(s[first]) << " (" << near_tie << " near-ties)";
}

// gdn_conv_prep_bf16x (on the device inputs proj, conv_w, A_log, dt_bias) into poisoned buffers,
// back on the host: xq, xk, xv, rq, rk, g, beta.
std::vector<std::vector<float>> run_prep_bf16x(const DeviceBuffer& dp, const DeviceBuffer& dc,
                                               const DeviceBuffer& da, const DeviceBuffer& db,
                                               const GdnPrepArgs& a, KernelPath path) {
  const size_t nq = size_t(a.T) * a.Hk * a.dk, nv = size_t(a.T) * a.Hv * a.dv,
               nr = size_t(a.T) * a.Hk, ng = size_t(a.T) * a.Hv;
  auto xq = poisoned<bf16>(nq), xk = poisoned<bf16>(nq), xv = poisoned<bf16>(nv);
  auto fq = poisoned<float>(nr), fk = poisoned<float>(nr), g = poisoned<float>(ng),
       beta = poisoned<float>(ng);
  gdn_conv_prep_bf16x(dp.get<bf16>(), dc.get<bf16>(), da.get<float>(), db.get<float>(), a,
                      {xq.get<bf16>(), xk.get<bf16>(), xv.get<bf16>(), fq.get<float>(),
                       fk.get<float>(), g.get<float>(), beta.get<float>()},
                      path, 0);
  return {to_host<bf16>(xq, nq),   to_host<bf16>(xk, nq),  to_host<bf16>(xv, nv),
          to_host<float>(fq, nr),  to_host<float>(fk, nr), to_host<float>(g, ng),
          to_host<float>(beta, ng)};
}

// gdn_conv_prep_bf16x on proj (bf16-exact; `a` as the kernels see it, a.positions on the device,
// `positions` its host copy or null) against the references on both paths: xq, xk, xv are the
// bf16-rounded conv + SiLU values (expect_bf16_rounding_of), rq and rk within 2e-6 of the l2
// factor (double) of the xq, xk written, g and beta as GdnConvPrep checks them; and xv, g, beta
// are the fp32 form's v, g, beta bit for bit (gdn_conv_prep on the same path).
void expect_bf16x_prep_matches(const std::vector<float>& proj, const std::vector<float>& conv,
                               const std::vector<float>& A_log, const std::vector<float>& dtb,
                               const GdnPrepArgs& a, const int32_t* positions) {
  const int T = a.T, Hk = a.Hk, Hv = a.Hv, dk = a.dk, dv = a.dv;
  const int Cq = Hk * dk, Cv = Hv * dv, C = 2 * Cq + Cv;
  const size_t nq = size_t(T) * Cq, nv = size_t(T) * Cv, ng = size_t(T) * Hv, nr = size_t(T) * Hk;
  std::vector<float> s(size_t(T) * C), rq(nq), rk(nq), rv(nv), rg(ng), rb(ng);
  ref::gdn_conv_silu_ref(proj.data(), T, a.ld, C, a.K, conv.data(), true, s.data(), positions);
  ref::gdn_conv_prep_ref(proj.data(), T, a.ld, Hk, Hv, dk, dv, a.K, a.b_offset, a.a_offset,
                         conv.data(), A_log.data(), dtb.data(), true, rq.data(), rk.data(),
                         rv.data(), rg.data(), rb.data(), positions);
  std::vector<float> sq(nq), sk(nq), sv(nv);  // s split into q, k, v
  for (int t = 0; t < T; ++t) {
    const auto row = s.begin() + ptrdiff_t(t) * C;
    std::copy(row, row + Cq, sq.begin() + ptrdiff_t(t) * Cq);
    std::copy(row + Cq, row + 2 * Cq, sk.begin() + ptrdiff_t(t) * Cq);
    std::copy(row + 2 * Cq, row + C, sv.begin() + ptrdiff_t(t) * Cv);
  }
  auto dp = to_device<bf16>(proj), dc = to_device<bf16>(conv);
  auto da = to_device<float>(A_log), db = to_device<float>(dtb);
  for (KernelPath path : kPaths) {
    SCOPED_TRACE(gdn_conv_prep_bf16x_variant(a, path));
    const auto out = run_prep_bf16x(dp, dc, da, db, a, path);
    const auto &hq = out[0], &hk = out[1], &hv = out[2], &hfq = out[3], &hfk = out[4], &hg = out[5],
               &hb = out[6];
    expect_bf16_rounding_of(hq, sq, "xq");
    expect_bf16_rounding_of(hk, sk, "xk");
    expect_bf16_rounding_of(hv, sv, "xv");
    // The factors of the values written (a near-tie flip changes them by far more than 2e-6).
    double worst = 0;
    for (size_t h = 0; h < nr; ++h) {
      const double wq = ref::gdn_l2_factor(&hq[h * dk], dk, 1.0 / std::sqrt(double(dk)));
      const double wk = ref::gdn_l2_factor(&hk[h * dk], dk, 1.0);
      const double e = std::max(std::fabs(hfq[h] - wq) / wq, std::fabs(hfk[h] - wk) / wk);
      worst = std::isfinite(hfq[h]) && std::isfinite(hfk[h]) ? std::max(worst, e) : HUGE_VAL;
    }
    EXPECT_LE(worst, 2e-6) << "rq, rk: worst relative error";
    CLEF_EXPECT_CLOSE(hg, rg, 1e-5);
    CLEF_EXPECT_CLOSE(hb, rb, kTol<bf16>);
    // The fp32 form on the same path: the same v, g and beta.
    auto q = poisoned<float>(nq), k = poisoned<float>(nq), v = poisoned<float>(nv),
         g32 = poisoned<float>(ng), b32 = poisoned<float>(ng);
    gdn_conv_prep<bf16>(dp.get<bf16>(), dc.get<bf16>(), da.get<float>(), db.get<float>(), a,
                        q.get<float>(), k.get<float>(), v.get<float>(), g32.get<float>(),
                        b32.get<float>(), path, 0);
    EXPECT_TRUE(hv == to_host<float>(v, nv)) << "xv differs from the fp32 form's v";
    EXPECT_TRUE(hg == to_host<float>(g32, ng)) << "g differs from the fp32 form's";
    EXPECT_TRUE(hb == to_host<float>(b32, ng)) << "beta differs from the fp32 form's";
  }
}

// The bf16 form of the GDN prep (gdn_conv_prep_bf16x, the tensor-core GDN's inputs) on
// GdnConvPrep's shapes (both variants under Auto, the generic one under Generic) and on the packed
// sequences of PackedSequencesRestartConvTapsAndRope, where explicit positions 0..T-1 must also
// give the same bits as none.
TEST(BackboneKernelsBf16, GdnConvPrepBf16x) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  const int K = 4;
  auto make = [&](const ConvPrepShape& sh, const int32_t* positions) {
    const int cqkv = 2 * sh.Hk * sh.dk + sh.Hv * sh.dv;
    const int ld = cqkv + sh.Hv * sh.dv + 2 * sh.Hv + sh.extra;
    const int b_off = cqkv + sh.Hv * sh.dv, a_off = b_off + sh.Hv;
    return GdnPrepArgs{sh.T, ld, sh.Hk, sh.Hv, sh.dk, sh.dv, K, b_off, a_off, positions};
  };
  auto inputs = [&](const GdnPrepArgs& a) {
    const int cqkv = 2 * a.Hk * a.dk + a.Hv * a.dv;
    std::vector<std::vector<float>> in = {
        rand_e<bf16>(rng, size_t(a.T) * a.ld, 1.0f), rand_e<bf16>(rng, size_t(cqkv) * K, 0.5f),
        randu(rng, a.Hv, 0.0f, 2.7f), randn(rng, a.Hv, 1.0f, 1.0f)};
    round_all_bf16(in[2]);
    round_all_bf16(in[3]);
    return in;
  };
  for (const ConvPrepShape& sh : kConvPrepShapes) {
    SCOPED_TRACE("T=" + std::to_string(sh.T) + " dk=" + std::to_string(sh.dk) +
                 " dv=" + std::to_string(sh.dv) + " extra=" + std::to_string(sh.extra));
    const GdnPrepArgs a = make(sh, nullptr);
    const auto in = inputs(a);
    expect_bf16x_prep_matches(in[0], in[1], in[2], in[3], a, nullptr);
  }

  const PackedPositions pp = packed_positions();
  const std::vector<int>& lens = pp.lens;
  const std::vector<int32_t>& pos = pp.pos;
  const int T = pp.T;
  const engine::cuda::DeviceBuffer &dpos = pp.dpos, &diota = pp.diota;
  for (int extra : {0, 3}) {  // tile and generic
    SCOPED_TRACE("packed, extra " + std::to_string(extra));
    const ConvPrepShape sh{T, 2, 4, 16, 16, extra};
    const GdnPrepArgs a = make(sh, dpos.get<int32_t>());
    const auto in = inputs(a);
    expect_bf16x_prep_matches(in[0], in[1], in[2], in[3], a, pos.data());
    auto dp = to_device<bf16>(in[0]), dc = to_device<bf16>(in[1]);
    auto da = to_device<float>(in[2]), db = to_device<float>(in[3]);
    for (KernelPath path : kPaths) {
      SCOPED_TRACE(gdn_conv_prep_bf16x_variant(a, path));
      auto run = [&](const int32_t* positions) {
        GdnPrepArgs pa = a;
        pa.positions = positions;
        const auto out = run_prep_bf16x(dp, dc, da, db, pa, path);
        return std::vector<std::vector<float>>(out.begin(), out.begin() + 5);  // xq .. rk
      };
      EXPECT_EQ(run(diota.get<int32_t>()), run(nullptr)) << "explicit 0..T-1 differs from none";
    }
  }
  {
    // The flash shape packed (PackedSequencesRestartConvTapsAndRope's long sequences): the tile
    // variant's 16-token blocks with sequences starting inside its groups.
    SCOPED_TRACE("packed, flash shape");
    const PackedPositions pf = packed_positions({1, 2, 3, 4, 13, 16, 17, 8, 936});
    const GdnPrepArgs a = make(ConvPrepShape{pf.T, 16, 32, 128, 128, 0}, pf.dpos.get<int32_t>());
    const auto in = inputs(a);
    expect_bf16x_prep_matches(in[0], in[1], in[2], in[3], a, pf.pos.data());
  }
}

// The tile variant's block sizes (GdnPrepArgs::tile_tokens 4, 8, 12, 16; 4 and 8 in fp32 storage)
// give the same bits in both output forms: packed sequences of 1..31 tokens starting inside groups
// and blocks, one sequence, T = 85 (no multiple of any block size), 3 (below one group) and 13,
// 2, 4 and 1 lanes per head (the last channel block partly idle); the 4-token run matches the
// reference too.
TYPED_TEST(BackboneKernels, GdnConvPrepTileBlockSizesAgree) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  const PackedPositions pp = packed_positions({1, 5, 2, 14, 3, 22, 7, 31});  // T = 85
  const int max_tokens = kBf16<E> ? 16 : 8;                                  // gdn_prep.cu
  struct Shape {
    int T, Hk, Hv, dk, dv;
    bool packed;
  };
  for (Shape sh : {Shape{85, 2, 4, 16, 16, true}, Shape{85, 2, 6, 32, 48, true},
                   Shape{85, 2, 4, 16, 16, false}, Shape{3, 2, 4, 16, 16, false},
                   Shape{13, 3, 3, 8, 8, false}}) {
    SCOPED_TRACE("T=" + std::to_string(sh.T) + " dk=" + std::to_string(sh.dk) +
                 (sh.packed ? " packed" : ""));
    const int K = 4, cqkv = 2 * sh.Hk * sh.dk + sh.Hv * sh.dv;
    const int b_off = cqkv + sh.Hv * sh.dv, a_off = b_off + sh.Hv;
    const int ld = (a_off + sh.Hv + 7) / 8 * 8;  // the tile path's stride (unused columns past a)
    auto proj = rand_e<E>(rng, size_t(sh.T) * ld, 1.0f);
    auto conv = rand_e<E>(rng, size_t(cqkv) * K, 0.5f);
    auto A_log = randu(rng, sh.Hv, 0.0f, 2.7f), dtb = randn(rng, sh.Hv, 1.0f, 1.0f);
    round_all_bf16(A_log);
    round_all_bf16(dtb);
    auto dp = to_device<E>(proj), dc = to_device<E>(conv);
    auto da = to_device<float>(A_log), db = to_device<float>(dtb);
    const GdnPrepArgs a{sh.T,  ld, sh.Hk, sh.Hv, sh.dk,
                        sh.dv, K,  b_off, a_off, sh.packed ? pp.dpos.get<int32_t>() : nullptr};
    ASSERT_STREQ(gdn_conv_prep_variant(a, KernelPath::Auto), "gdn_conv_prep_tile");
    const size_t nq = size_t(sh.T) * sh.Hk * sh.dk, nv = size_t(sh.T) * sh.Hv * sh.dv,
                 ng = size_t(sh.T) * sh.Hv;
    auto run = [&](int n) {
      GdnPrepArgs an = a;
      an.tile_tokens = n;
      auto q = poisoned<float>(nq), k = poisoned<float>(nq), v = poisoned<float>(nv),
           g = poisoned<float>(ng), beta = poisoned<float>(ng);
      gdn_conv_prep<E>(dp.template get<E>(), dc.template get<E>(), da.template get<float>(),
                       db.template get<float>(), an, q.template get<float>(),
                       k.template get<float>(), v.template get<float>(), g.template get<float>(),
                       beta.template get<float>(), KernelPath::Auto, 0);
      std::vector<std::vector<float>> out = {to_host<float>(q, nq), to_host<float>(k, nq),
                                             to_host<float>(v, nv), to_host<float>(g, ng),
                                             to_host<float>(beta, ng)};
      if constexpr (kBf16<E>) {
        for (auto& o : run_prep_bf16x(dp, dc, da, db, an, KernelPath::Auto))
          out.push_back(std::move(o));
      }
      return out;
    };
    std::vector<float> rq(nq), rk(nq), rv(nv), rg(ng), rb(ng);
    ref::gdn_conv_prep_ref(proj.data(), sh.T, ld, sh.Hk, sh.Hv, sh.dk, sh.dv, K, b_off, a_off,
                           conv.data(), A_log.data(), dtb.data(), kBf16<E>, rq.data(), rk.data(),
                           rv.data(), rg.data(), rb.data(), sh.packed ? pp.pos.data() : nullptr);
    const auto base = run(4);
    CLEF_EXPECT_CLOSE(base[0], rq, kTol<E>);
    CLEF_EXPECT_CLOSE(base[1], rk, kTol<E>);
    CLEF_EXPECT_CLOSE(base[2], rv, kTol<E>);
    CLEF_EXPECT_CLOSE(base[3], rg, 1e-5);
    CLEF_EXPECT_CLOSE(base[4], rb, kTol<E>);
    for (int n = 8; n <= max_tokens; n += 4) EXPECT_EQ(run(n), base) << "tile_tokens " << n;
    EXPECT_THROW(run(6), std::invalid_argument);
    EXPECT_THROW(run(max_tokens + 4), std::invalid_argument);
  }
}

TYPED_TEST(BackboneKernels, Swiglu) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    int T, I;
  };
  // vector: 384, 12288 (flash, 3 blocks per row); scalar: 100. Each also run on a copy one element
  // further (misaligned: scalar path), which must give identical bits.
  for (Case c : {Case{45, 384}, Case{45, 100}, Case{9, 12288}}) {
    SCOPED_TRACE("I=" + std::to_string(c.I));
    const int T = c.T, I = c.I;
    auto gu = rand_e<E>(rng, size_t(T) * 2 * I, 2.0f);
    std::vector<float> gu1(gu.size() + 1, 0.0f);
    std::copy(gu.begin(), gu.end(), gu1.begin() + 1);
    auto dgu = to_device<E>(gu), dgu1 = to_device<E>(gu1);
    std::vector<float> ref(size_t(T) * I);
    ref::swiglu_ref(gu.data(), ref.data(), T, I, kBf16<E>);
    for (KernelPath path : kPaths) {
      SCOPED_TRACE(swiglu_variant(I, path));
      auto out = poisoned<E>(size_t(T) * I), out1 = poisoned<E>(size_t(T) * I + 1);
      swiglu<E>(dgu.template get<E>(), out.template get<E>(), T, I, path, 0);
      swiglu<E>(dgu1.template get<E>() + 1, out1.template get<E>() + 1, T, I, path, 0);
      const auto got = to_host<E>(out, ref.size());
      CLEF_EXPECT_CLOSE(got, ref, kTol<E>);
      CLEF_EXPECT_CLOSE(drop_front(to_host<E>(out1, ref.size() + 1), 1), got, 0.0);  // exact
    }
  }
}

TYPED_TEST(BackboneKernels, ToFloat) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    size_t n;
    int in_off;
  };
  // vector with and without a tail, n < 8 (tail only), misaligned input (scalar), a long one
  // (grid-stride loop).
  for (Case c :
       {Case{1000, 0}, Case{1003, 0}, Case{5, 0}, Case{1003, 1}, Case{(size_t(1) << 23) + 43, 0}}) {
    SCOPED_TRACE("n=" + std::to_string(c.n) + " off=" + std::to_string(c.in_off));
    auto x = rand_e<E>(rng, c.in_off + c.n);
    auto dx = to_device<E>(x);
    for (KernelPath path : kPaths) {
      SCOPED_TRACE(to_float_variant(path));
      auto out = poisoned<float>(c.n);
      to_float<E>(dx.template get<E>() + c.in_off, out.template get<float>(), c.n, path, 0);
      CLEF_EXPECT_CLOSE(to_host<float>(out, c.n), drop_front(x, c.in_off), 0.0);
    }
  }
}

// Chunked (GPU) vs the exact sequential recurrence (CPU, double): lengths around chunk boundaries,
// GQA ratios 2 and 3, head dims below and at 128, and a strongly decaying case (g down to -40) that
// would overflow if exp(-gamma) were ever formed. Both paths: Auto (bf16: the tensor-core kernels
// where gdn::tc_supported) and Generic (the SIMT kernels), each fed the form of the inputs it takes
// (gdn_test_inputs.h: the same q, k, v in both, as the reference reads them).
TYPED_TEST(BackboneKernels, GdnChunkedMatchesSequentialRecurrence) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  struct Case {
    int T, Hk, Hv, dk, dv;
    float g_min;
  };
  for (Case c : {Case{1, 2, 4, 16, 16, -2}, Case{64, 2, 4, 16, 16, -2}, Case{200, 2, 4, 16, 16, -2},
                 Case{130, 2, 6, 32, 48, -2}, Case{129, 4, 8, 128, 128, -0.05f},
                 Case{300, 16, 32, 128, 128, -2}, Case{150, 2, 4, 64, 64, -40},
                 Case{1100, 16, 32, 128, 128, -0.3f}}) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " dk=" + std::to_string(c.dk) +
                 " dv=" + std::to_string(c.dv));
    const GdnTestInputs in = gdn_test_inputs(rng, c.T, c.Hk, c.Hv, c.dk, c.dv, c.g_min);
    const size_t no = size_t(c.T) * c.Hv * c.dv;
    std::vector<float> ref(no);
    ref::gated_delta_rule_ref(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                              c.T, c.Hk, c.Hv, c.dk, c.dv, ref.data());
    for (KernelPath path : kPaths) {
      const char* variant = gdn_chunked_variant(c.dk, c.dv, kBf16<E>, path);
      SCOPED_TRACE(variant);
      if (path == KernelPath::Generic) EXPECT_STREQ(variant, "gdn_simt");
      DeviceBuffer ws(gdn_workspace_bytes(c.T, c.Hv, c.dk, c.dv));
      CLEF_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));
      auto o = poisoned<E>(no);
      gdn_chunked<E>(in.form_for(c.dk, c.dv, kBf16<E>, path), c.T, c.Hk, c.Hv, c.dk, c.dv,
                     o.template get<E>(), ws.get(), path, 0);
      CLEF_EXPECT_CLOSE(to_host<E>(o, no), ref,
                        kBf16<E> ? 1e-2 : 2e-5);  // bf16: TF32 matmuls + bf16 output
    }
  }
}

// gdn_chunked takes the form of GdnInputs that its path reads, and refuses the other one instead of
// reading null pointers: the fp32 form on the tensor-core path, the bf16 form on the SIMT path.
TEST(GdnChunked, RefusesTheOtherInputForm) {
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  const int T = 70, Hk = 2, Hv = 4, d = 16;
  const GdnTestInputs in = gdn_test_inputs(rng, T, Hk, Hv, d, d, -2.0f);
  DeviceBuffer ws(gdn_workspace_bytes(T, Hv, d, d));
  auto o = poisoned<float>(size_t(T) * Hv * d);  // room for either output type
  for (KernelPath path : kPaths) {
    SCOPED_TRACE(kernel_path_name(path));
    const bool bf16_tc = gdn_takes_bf16_inputs(d, d, true, path);
    EXPECT_THROW(
        gdn_chunked<bf16>(in.form(!bf16_tc), T, Hk, Hv, d, d, o.get<bf16>(), ws.get(), path, 0),
        std::invalid_argument);
    EXPECT_FALSE(gdn_takes_bf16_inputs(d, d, false, path));  // fp32: always SIMT
    EXPECT_THROW(
        gdn_chunked<float>(in.form(true), T, Hk, Hv, d, d, o.get<float>(), ws.get(), path, 0),
        std::invalid_argument);
  }
  EXPECT_FALSE(gdn_takes_bf16_inputs(d, d, true, KernelPath::Generic));
  EXPECT_EQ(gdn_takes_bf16_inputs(d, d, true, KernelPath::Auto),
            std::string(gdn_chunked_variant(d, d, true, KernelPath::Auto)) == "gdn_tensor_core");
}

TYPED_TEST(BackboneKernels, GemmMatchesDoubleReference) {
  using E = TypeParam;
  CLEF_REQUIRE_GPU();
  auto rng = fresh_rng();
  Gemm gemm;
  const DataType dt = kBf16<E> ? DataType::BF16 : DataType::F32;
  struct Shape {
    int M, N, K, ldx, ldy;
  };
  for (Shape sh : {Shape{77, 96, 64, 64, 96}, Shape{130, 200, 136, 136, 208},
                   Shape{5, 4096, 512, 512, 4096}}) {
    for (bool acc : {false, true}) {
      auto x = rand_e<E>(rng, size_t(sh.M) * sh.ldx);
      auto w = rand_e<E>(rng, size_t(sh.N) * sh.K, 0.05f);
      auto y0 = rand_e<E>(rng, size_t(sh.M) * sh.ldy);
      auto dx = to_device<E>(x), dw = to_device<E>(w), dy = to_device<E>(y0);
      GemmProblem p;
      p.M = sh.M;
      p.N = sh.N;
      p.K = sh.K;
      p.a = {dx.get(), dt, sh.ldx};
      p.b = {dw.get(), dt, sh.K};
      p.c = dy.get();
      p.c_dtype = dt;
      p.ldc = sh.ldy;
      p.accumulate = acc;
      gemm.run(p, 0);
      auto got = to_host<E>(dy, y0.size());
      std::vector<float> ref(y0);
      ref::gemm_ref(x.data(), sh.ldx, w.data(), ref.data(), sh.ldy, sh.M, sh.N, sh.K, acc);
      std::vector<float> g2, r2;
      for (int m = 0; m < sh.M; ++m)
        for (int n = 0; n < sh.N; ++n) {
          g2.push_back(got[size_t(m) * sh.ldy + n]);
          r2.push_back(ref[size_t(m) * sh.ldy + n]);
        }
      CLEF_EXPECT_CLOSE(g2, r2, kBf16<E> ? 5e-3 : 1e-5);
      // Columns past N (ld padding) are left alone.
      for (int m = 0; m < sh.M; ++m)
        for (int n = sh.N; n < sh.ldy; ++n)
          EXPECT_EQ(got[size_t(m) * sh.ldy + n], y0[size_t(m) * sh.ldy + n]);
    }
  }
  EXPECT_GT(gemm.tuned_shapes(), 0u);
}

// The variant names the engine reports (info()) follow the path and the shapes.
TEST(KernelVariants, NamesFollowPathAndShapes) {
  const KernelPath A = KernelPath::Auto, G = KernelPath::Generic;
  EXPECT_STREQ(rms_norm_1p_variant(4096, 4096, 4096, A), "rms_norm_1p_vec8");
  EXPECT_STREQ(rms_norm_1p_variant(4096, 4096, 4096, G), "rms_norm_1p_generic");
  EXPECT_STREQ(rms_norm_1p_variant(300, 300, 300, A), "rms_norm_1p_generic");
  EXPECT_STREQ(gated_rms_norm_variant(12352, 128, A), "gated_rms_norm_vec8");
  EXPECT_STREQ(gated_rms_norm_variant(12352, 128, G), "gated_rms_norm_generic");
  EXPECT_STREQ(gated_rms_norm_variant(12353, 128, A), "gated_rms_norm_generic");
  const GdnPrepArgs gp{361, 12352, 16, 32, 128, 128, 4, 12288, 12320};
  EXPECT_STREQ(gdn_conv_prep_variant(gp, A), "gdn_conv_prep_tile");
  EXPECT_STREQ(gdn_conv_prep_variant(gp, G), "gdn_conv_prep_generic");
  EXPECT_STREQ(gdn_conv_prep_bf16x_variant(gp, A), "gdn_conv_prep_bf16x_tile");
  EXPECT_STREQ(gdn_conv_prep_bf16x_variant(gp, G), "gdn_conv_prep_bf16x_generic");
  const AttnPrepArgs ap{361, 10240, 16, 4, 256, 64, 1e-6f, nullptr};
  EXPECT_STREQ(attn_prep_variant(ap, A), "attn_prep_vec8");
  EXPECT_STREQ(attn_prep_variant(ap, G), "attn_prep_generic");
  EXPECT_STREQ(attn_output_gate_variant(10240, 256, A), "attn_output_gate_vec8");
  EXPECT_STREQ(attn_output_gate_variant(10243, 256, A), "attn_output_gate_generic");
  EXPECT_STREQ(attn_output_gate_variant(10240, 256, G), "attn_output_gate_generic");
  EXPECT_STREQ(embed_gather_variant(4096, true, A), "embed_gather_vec8");
  EXPECT_STREQ(embed_gather_variant(130, true, A), "embed_gather_generic");
  EXPECT_STREQ(embed_gather_variant(4096, true, G), "embed_gather_generic");
  EXPECT_STREQ(swiglu_variant(12288, A), "swiglu_vec8");
  EXPECT_STREQ(swiglu_variant(100, A), "swiglu_generic");
  EXPECT_STREQ(swiglu_variant(12288, G), "swiglu_generic");
  EXPECT_STREQ(to_float_variant(A), "to_float_vec8");
  EXPECT_STREQ(to_float_variant(G), "to_float_generic");
  EXPECT_STREQ(gdn_chunked_variant(128, 128, false, A), "gdn_simt");
  EXPECT_STREQ(gdn_chunked_variant(128, 128, true, G), "gdn_simt");
  CLEF_REQUIRE_GPU();  // tc_supported asks the device
  EXPECT_STREQ(gdn_chunked_variant(128, 128, true, A),
               gdn::tc_supported(128, 128) ? "gdn_tensor_core" : "gdn_simt");
}

}  // namespace
}  // namespace clef

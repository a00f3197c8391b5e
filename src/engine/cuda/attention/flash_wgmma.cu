// The Hopper (sm_90a) bf16 flash-attention kernel: the same contract and online softmax as
// flash_bf16.cuh's mma.sync kernel, with both products on warpgroup MMAs (wgmma.mma_async), which
// issue a 64 x N x 16 product per instruction from shared-memory operands instead of one m16n8k16
// per warp from registers (no ldmatrix traffic, 1.5x the mma.sync peak on an H200).
//
// One CTA of two warpgroups per (128-query tile, query head); warpgroup w owns query rows
// q0 + 64 w .. + 63. K and V tiles of BC keys are double-buffered in shared memory (cp.async; the
// next tile loads while this one computes) and shared by both warpgroups. Per key tile, per
// warpgroup: S = Q K^T (HD / 16 SS wgmmas, both operands K-major), mask, online softmax in fp32
// (exp2, running max, as the mma.sync kernel), P rounded to bf16 into registers, O += P V (BC / 16
// RS wgmmas, V read MN-major). Shared tiles use the no-swizzle canonical layout: 8 x 16-byte "core
// matrices" (8 rows of 8 bf16), element (r, c) of an R x C tile at ((r / 8) (C / 8) + c / 8) 64 +
// (r % 8) 8 + c % 8, so a tile's rows map to the K-major (Q, K) and MN-major (V) descriptors with
// strides of 128 B along the contiguous dimension and 16 C B across 8-row groups.
#include <cuda_bf16.h>

#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/flash_bf16.cuh"
#include "engine/cuda/attention/flash_wgmma.h"
#include "engine/cuda/attention/kv_tiles.h"
#include "engine/cuda/attention/wgmma_ops.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/hopper_async.cuh"

namespace clef::engine::cuda {
namespace {

using namespace flash;
constexpr int kWgRows = 64;  // query rows per warpgroup (wgmma's M)
// A CTA of WG warpgroups (2, or 4: each K/V tile fetched from L2 once for twice the query rows,
// where the L2's request rate binds) takes br(WG) query rows.
constexpr int br(int wg) {
  return kWgRows * wg;
}
constexpr int threads(int wg) {
  return 128 * wg;
}

// Q, K and V rows sit in shared memory zero-padded to wgmma's k-step of 16 (72 -> 80): PV reads
// only V's first HD columns (N = 72), but K and V tiles then share one copy plan (TilePlan).
constexpr int padded_k(int hd) {
  return (hd + 15) / 16 * 16;
}
// kv_tiled: K and V arrive by bulk copies, counted by one "full" mbarrier a stage (and one
// "empty" one where warps release stages) ahead of the tiles (kBarBytes).
constexpr size_t kBarBytes = 128;
// Two-warpgroup key-tiled kernels (head dim 256) refill each stage from the last warp to release it
// and keep K and V on their own rings: two stages each, with the overlap too (K_{j+1} and V_j are
// the two in use then; no third stage fits next to a 128 x 256 Q).
constexpr bool refills(int wg, bool kv_tiled) {
  return kv_tiled && wg == 2;
}
constexpr int kv_stages(bool overlap, int wg, bool kv_tiled) {
  return overlap && !refills(wg, kv_tiled) ? 3 : 2;
}
constexpr size_t wgmma_smem_bytes(int hd, int bc, bool overlap, int wg, bool kv_tiled = false) {
  const int stages = kv_stages(overlap, wg, kv_tiled);
  return static_cast<size_t>(br(wg) + 2 * stages * bc) * padded_k(hd) * 2 +
         (kv_tiled ? kBarBytes : 0);
}
constexpr size_t kSlack = 32 * 1024;
// Two CTAs of two warpgroups an SM where the accumulators leave 128 registers a thread and the
// tiles (with the slack) fit twice in 228 KiB: head dims up to 128, overlapped up to 80. One CTA of
// four warpgroups (128 registers a thread too).
constexpr int wgmma_min_blocks(int hd, int bc, bool overlap, int wg) {
  return wg == 2 && bc == 64 && hd <= (overlap ? 80 : 128) ? 2 : 1;
}

// Device helpers: compiled for sm_90a only (other targets build the kernel as a trap).
#ifdef CLEF_WGMMA_AVAILABLE
using namespace hopper;  // fences, waits and mbarriers (hopper_async.cuh)

// Bulk copies (kv_tiled): one thread announces a stage's bytes and issues its two copies; every
// thread waits for the phase the copies complete.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes,
                                              uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// Rows [row0, row0 + ROWS) of a [*, heads, HD] tensor's head into the canonical layout with ELEMS
// columns (>= HD; the columns past HD and the rows at or past `end` are zero-filled). Thread c
// takes row (c / 8 / (ELEMS / 8)) 8 + c % 8, 16-byte column chunk (c / 8) % (ELEMS / 8): eight
// consecutive threads fill one 128-byte core matrix (no bank conflicts) and a warp reads 64
// contiguous bytes of each of 8 rows.
template <int HD, int ELEMS, int ROWS, int kThreads>
__device__ __forceinline__ void load_canonical(__nv_bfloat16* tile, const __nv_bfloat16* base,
                                               int row0, int end, int row_stride) {
  constexpr int kChunks = ROWS * ELEMS / 8, kCol = ELEMS / 8;
  for (int c = threadIdx.x; c < kChunks; c += kThreads) {
    const int r8 = c & 7, kc = (c >> 3) % kCol, rg = (c >> 3) / kCol;
    const int row = row0 + rg * 8 + r8;
    const bool ok = row < end && kc < HD / 8;
    const __nv_bfloat16* src =
        base + static_cast<size_t>(ok ? row : 0) * row_stride + (ok ? kc : 0) * 8;
    cp_async16(tile + (rg * kCol + kc) * 64 + r8 * 8, src, ok ? 16 : 0);
  }
}

// One thread's share of a K or V tile's copy (ROWS x ELEMS canonical, HD columns of data), the
// same for every tile, so computed once per kernel (per-tile divisions and a runtime loop were half
// of the main loop's instructions). Each group of eight threads copies the two 16-byte chunks of
// one 32-byte global sector for four rows: a sector is fetched once, not twice as with eight rows
// of one chunk (the L2's request rate bound the kernel: one request per sector), for a 2-way bank
// conflict on the shared side. `shift` (0 or 1) aligns the pairs to sectors: a head's rows start at
// odd 16-byte offsets when HD / 8 is odd (72 columns: 144 bytes). Padding columns (HD..ELEMS) are
// never copied: zero_padding clears them once.
template <int HD, int ELEMS, int ROWS, int kThreads>
struct TilePlan {
  static constexpr int kData = HD / 8, kCol = ELEMS / 8;
  static constexpr int kPairs = (kData + 1) / 2;    // per row, whichever the shift
  static constexpr int kLanes = ROWS * kPairs * 2;  // 16-byte copies, some skipped
  static constexpr int kSlots = (kLanes + kThreads - 1) / kThreads;
  static constexpr int kSkip = 1 << 30;
  int src[kSlots];       // element offset from the tile's first row in global memory
  uint32_t dst[kSlots];  // byte offset in the stage
  int row[kSlots];       // row within the tile, or kSkip (no chunk: before 0 or past HD)

  __device__ __forceinline__ TilePlan(int row_stride, int shift) {
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int c = static_cast<int>(threadIdx.x) + i * kThreads;
      const int group = c >> 3, lane = c & 7;  // 8 lanes: 4 rows x 2 chunks of one sector
      const int r = (group / kPairs) * 4 + (lane >> 1);
      const int kc = (group % kPairs) * 2 - shift + (lane & 1);
      const bool copy = c < kLanes && kc >= 0 && kc < kData;
      row[i] = copy ? r : kSkip;
      src[i] = copy ? r * row_stride + kc * 8 : 0;
      dst[i] = copy ? static_cast<uint32_t>((((r >> 3) * kCol + kc) * 64 + (r & 7) * 8) * 2) : 0;
    }
  }
  // The tile whose first row is row0 (rows at or past `end` zero-filled) into the stage at
  // shared address `stage`.
  __device__ __forceinline__ void load(uint32_t stage, const __nv_bfloat16* base, int row0, int end,
                                       int row_stride) const {
    const __nv_bfloat16* tile = base + static_cast<size_t>(row0) * row_stride;
    const int rows_left = end - row0;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      if (row[i] == kSkip) continue;
      const bool ok = row[i] < rows_left;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(stage + dst[i]),
                   "l"(tile + (ok ? src[i] : 0)), "r"(ok ? 16 : 0));
    }
  }
  // Zeros the padding columns of `tiles` consecutive stages at `smem` (before their first use;
  // made visible to wgmma by the fence and barrier ahead of the first product).
  static __device__ __forceinline__ void zero_padding(__nv_bfloat16* smem, int tiles) {
    if constexpr (kData < kCol) {
      constexpr int kPad = kCol - kData, kPer = ROWS * kPad;
      for (int c = threadIdx.x; c < tiles * kPer; c += kThreads) {
        const int t = c / kPer, r = (c % kPer) / kPad, kc = kData + (c % kPer) % kPad;
        *reinterpret_cast<uint4*>(smem + t * ROWS * ELEMS + ((r >> 3) * kCol + kc) * 64 +
                                  (r & 7) * 8) = make_uint4(0, 0, 0, 0);
      }
    }
  }
};

// 2^x without the denormal fix-up exp2f adds (a compare and two multiplies per call): results
// below 2^-126 flush to 0, far under what a bf16 P or an fp32 row sum can resolve.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <int N>
struct SsOp;
template <>
struct SsOp<64> {
  static __device__ __forceinline__ void run(float (&d)[32], uint64_t a, uint64_t b, int sc) {
    wgmma::ss_m64n64k16(d, a, b, sc);
  }
};
template <int N>
struct RsOp;
#define CLEF_RS_OP(N)                                                                     \
  template <>                                                                             \
  struct RsOp<N> {                                                                        \
    static __device__ __forceinline__ void run(float (&d)[N / 2], const uint32_t (&a)[4], \
                                               uint64_t b, int sc) {                      \
      wgmma::rs_m64n##N##k16(d, a, b, sc);                                                \
    }                                                                                     \
  };
CLEF_RS_OP(64)
CLEF_RS_OP(72)
CLEF_RS_OP(80)
CLEF_RS_OP(128)
CLEF_RS_OP(256)
#undef CLEF_RS_OP

// Online softmax of one key tile for this thread's two rows (g and g + 8 of its warp's 16):
// masks keys before `lo` and past each row's limit when `diagonal`, updates the running max (log2
// domain) and row sums, leaves exp2(s - m) in s and returns the factors O must be rescaled by. The
// running max is lazy: it moves only when a row's scores pass it by more than kLazyMax (log2), so
// after the first tiles alpha is 1 and O's rescale is skipped (rescale_if_needed). O and l share
// the stale max, so the quotient is unchanged; p stays below 2^kLazyMax, which bf16 and fp32 hold
// exactly as well.
constexpr float kLazyMax = 8.f;
template <int BC>
__device__ __forceinline__ void tile_softmax(float (&s)[BC / 2], bool diagonal, int key0, int tig,
                                             int lo, int lim_a, int lim_b, float scale_log2,
                                             float (&m_run)[2], float (&l_run)[2],
                                             float (&alpha)[2]) {
  if (diagonal) {
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt) {
      const int key = key0 + nt * 8 + tig * 2;
      const bool below0 = key < lo, below1 = key + 1 < lo;  // a neighbour's keys (kv_tiled)
      if (below0 || key > lim_a) s[4 * nt + 0] = -INFINITY;
      if (below1 || key + 1 > lim_a) s[4 * nt + 1] = -INFINITY;
      if (below0 || key > lim_b) s[4 * nt + 2] = -INFINITY;
      if (below1 || key + 1 > lim_b) s[4 * nt + 3] = -INFINITY;
    }
  }
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < BC / 8; ++nt) {
    mx[0] = fmaxf(mx[0], fmaxf(s[4 * nt + 0], s[4 * nt + 1]));
    mx[1] = fmaxf(mx[1], fmaxf(s[4 * nt + 2], s[4 * nt + 3]));
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = mx[r] * scale_log2;  // (-inf - -inf is NaN: no move while both are -inf)
    if (m_new > m_run[r] + kLazyMax) {
      alpha[r] = exp2_ftz(m_run[r] - m_new);  // 0 on the first tile with a visible key
      m_run[r] = m_new;
    } else {
      alpha[r] = 1.f;
    }
  }
  const float mb0 = m_run[0] == -INFINITY ? 0.f : m_run[0];
  const float mb1 = m_run[1] == -INFINITY ? 0.f : m_run[1];
  float rs[2] = {0.f, 0.f};
#pragma unroll
  for (int nt = 0; nt < BC / 8; ++nt) {
    s[4 * nt + 0] = exp2_ftz(s[4 * nt + 0] * scale_log2 - mb0);
    s[4 * nt + 1] = exp2_ftz(s[4 * nt + 1] * scale_log2 - mb0);
    s[4 * nt + 2] = exp2_ftz(s[4 * nt + 2] * scale_log2 - mb1);
    s[4 * nt + 3] = exp2_ftz(s[4 * nt + 3] * scale_log2 - mb1);
    rs[0] += s[4 * nt + 0] + s[4 * nt + 1];
    rs[1] += s[4 * nt + 2] + s[4 * nt + 3];
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + rs[r];
}

// P (exp values in s) rounded to bf16 as wgmma A fragments, one per 16-key k-step.
template <int BC>
__device__ __forceinline__ void pack_p(const float (&s)[BC / 2], uint32_t (&p)[BC / 16][4]) {
#pragma unroll
  for (int nt = 0; nt < BC / 8; ++nt) {
    p[nt / 2][(nt % 2) * 2 + 0] = pack_bf16(s[4 * nt + 0], s[4 * nt + 1]);
    p[nt / 2][(nt % 2) * 2 + 1] = pack_bf16(s[4 * nt + 2], s[4 * nt + 3]);
  }
}

template <int HD>
__device__ __forceinline__ void rescale(float (&o)[HD / 2], const float (&alpha)[2]) {
  // Warp-uniform: with the lazy max almost every tile skips the HD / 2 multiplies.
  if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt) {
    o[4 * nt + 0] *= alpha[0];
    o[4 * nt + 1] *= alpha[0];
    o[4 * nt + 2] *= alpha[1];
    o[4 * nt + 3] *= alpha[1];
  }
}

#endif  // CLEF_WGMMA_AVAILABLE

// HD: the head dim (a multiple of 8); Q and K rows sit in shared memory zero-padded to HDK (a
// multiple of 16, wgmma's k-step), V rows as they are (PV's N is HD). OVERLAP (three K/V stages):
// each warpgroup issues S_{j+1} = Q K_{j+1}^T and O += P_j V_j back to back, then computes tile
// j + 1's softmax while the tensor cores run P_j V_j; without it (two stages) the products and the
// softmax of a tile run one after the other. KV 1: k and v in key tiles (kv_tiles.h), each stage
// filled by two bulk copies that thread 0 issues (whole lines from the L2 instead of a request per
// 16 bytes), key tiles aligned to the global 64-row blocks (a sequence starting inside one masks
// the keys before it), a CTA barrier per tile before a stage is refilled. KV 2: no CTA barrier;
// each warp arrives on its stage's "empty" mbarrier once done with the stage, and thread 0 waits
// for that before refilling it, so only warpgroup 0 waits for the slowest one. (A producer warp
// past the 16 would give one SM sub-partition five warps: 96 registers a thread, and spills.)
template <int HD, int BC, bool CAUSAL, bool OVERLAP, int WG, int KV>
__global__ void __launch_bounds__(threads(WG), wgmma_min_blocks(HD, BC, OVERLAP, WG))
    flash_wgmma_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                       const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ out, int T,
                       int n_heads, int group, float scale_log2, const int4* __restrict__ tiles,
                       int layout, int kv_head_blocks) {
#ifdef CLEF_WGMMA_AVAILABLE
  constexpr int HDK = padded_k(HD), kStages = kv_stages(OVERLAP, WG, KV != 0), kBr = br(WG),
                kThreads = threads(WG);
  static_assert(HD % 8 == 0 && BC % 16 == 0, "n8 tiles, k16 steps");
  constexpr bool KVT = KV != 0, RELEASE = KV == 2, REFILL = refills(WG, KVT);
  static_assert(!REFILL || RELEASE, "the refilling kernels release on counters");
  static_assert(!KVT || (BC == kKvTileRows && HDK == kv_tile_cols(HD)), "key tiles are stages");
  constexpr uint32_t kStageBytes = BC * HDK * 2;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t bars = smem_addr(smem_raw);  // kStages "full" mbarriers (KVT)
  const uint32_t empties = bars + 64;         // kStages "empty" mbarriers (KV 2)
  // REFILL (two stages): K's full barriers at bars, V's at bars + 16; then per tensor and stage
  // the count of warps that have released it, ever (K stage 0, 1, V stage 0, 1).
  auto bar_k = [&](int tile) { return bars + static_cast<uint32_t>(tile % kStages) * 8; };
  auto bar_v = [&](int tile) { return bar_k(tile) + 16; };
  uint32_t* released = reinterpret_cast<uint32_t*>(smem_raw + 32);
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw + (KVT ? kBarBytes : 0));
  __nv_bfloat16* sK = sQ + kBr * HDK;           // [kStages][BC * HDK]
  __nv_bfloat16* sV = sK + kStages * BC * HDK;  // [kStages][BC * HDK]

  int q0, s0, s1;
  if (!cta_rows(tiles, kBr, T, q0, s0, s1)) return;  // an unused slot
  const int h = cta_head(), kvh = h / group, n_kv = n_heads / group;
  const int q_stride = n_heads * HD, kv_stride = n_kv * HD;
  const __nv_bfloat16* qh = q + static_cast<size_t>(h) * HD;
  // Row layout: the head's first column; key tiles: the head's first block (per-sequence tiles,
  // kv_head_blocks > 0: kv_head_blocks blocks a head, this sequence's from the slot's 4th int).
  const bool per_seq = KVT && kv_head_blocks > 0;
  const int head_blocks = per_seq ? kv_head_blocks : kv_tile_blocks(T);
  const size_t kv_head =
      KVT ? kv_tiled_at(0, kvh, 0, head_blocks, HD) : static_cast<size_t>(kvh) * HD;
  const __nv_bfloat16* kh = k + kv_head;
  const __nv_bfloat16* vh = v + kv_head;

  const int wg = threadIdx.x / 128, wl = threadIdx.x % 128;
  const int warp = wl / 32, lane = wl % 32, g = lane / 4, tig = lane % 4;

  const int last_key = CAUSAL ? min(q0 + kBr, s1) - 1 : s1 - 1;
  // Tile j holds keys key_base + j BC .. (global key tiles: from s0's block, whose keys before s0
  // are masked) in block block0 + j.
  const int key_base = KVT && !per_seq ? s0 / BC * BC : s0;
  const int block0 = per_seq ? tiles[cta_tile()].w : key_base / BC;
  const int n_tiles = (last_key - key_base) / BC + 1;
  const uint32_t sK_addr = smem_addr(sK), sV_addr = smem_addr(sV);
  using Plan = TilePlan<HD, HDK, BC, kThreads>;
  // K and V heads start at the same offset in their rows: one shift for both.
  const Plan plan(kv_stride,
                  (HD / 8) % 2 ? static_cast<int>((reinterpret_cast<uintptr_t>(kh) >> 4) & 1) : 0);
  // One tensor's tile (REFILL: K or V on its own barrier), by one thread.
  auto load_tiled = [&](int tile, bool is_v) {
    const uint32_t st = static_cast<uint32_t>(tile % kStages) * kStageBytes;
    const uint32_t bar = is_v ? bar_v(tile) : bar_k(tile);
    const size_t at = static_cast<size_t>(block0 + tile) * BC * HDK;
    mbar_expect_tx(bar, kStageBytes);
    bulk_copy_g2s((is_v ? sV_addr : sK_addr) + st, (is_v ? vh : kh) + at, kStageBytes, bar);
  };
  auto load_kv = [&](int tile) {
    const uint32_t st = static_cast<uint32_t>(tile % kStages) * kStageBytes;
    if constexpr (KVT) {  // thread 0 only
      const uint32_t bar = bars + static_cast<uint32_t>(tile % kStages) * 8;
      const size_t at = static_cast<size_t>(block0 + tile) * BC * HDK;
      mbar_expect_tx(bar, 2 * kStageBytes);
      bulk_copy_g2s(sK_addr + st, kh + at, kStageBytes, bar);
      bulk_copy_g2s(sV_addr + st, vh + at, kStageBytes, bar);
    } else {
      plan.load(sK_addr + st, kh, s0 + tile * BC, s1, kv_stride);
      plan.load(sV_addr + st, vh, s0 + tile * BC, s1, kv_stride);
    }
  };
  // Waits until tile j's K and V have landed (KVT: the copies' phase of its stage's barrier).
  auto wait_kv = [&](int tile) {
    if constexpr (KVT)
      mbar_wait(bars + static_cast<uint32_t>(tile % kStages) * 8,
                static_cast<uint32_t>(tile / kStages) & 1);
  };
  if constexpr (REFILL) {
    if (threadIdx.x == 0) {
      for (int i = 0; i < kStages; ++i) {
        mbar_init(bar_k(i), 1);
        mbar_init(bar_v(i), 1);
        released[i] = released[kStages + i] = 0;
      }
      mbar_init_fence();
      for (int t = 0; t < kStages && t < n_tiles; ++t) load_tiled(t, false), load_tiled(t, true);
    }
  } else if constexpr (KVT) {
    if (threadIdx.x == 0) {
      for (int i = 0; i < kStages; ++i) {
        mbar_init(bars + 8 * i, 1);
        if (RELEASE) mbar_init(empties + 8 * i, kThreads / 32);
      }
      mbar_init_fence();
      load_kv(0);
      if (n_tiles > 1) load_kv(1);
    }
  } else {
    Plan::zero_padding(sK, 2 * kStages);  // sV follows sK: both tensors' stages
  }
  load_canonical<HD, HDK, kBr, kThreads>(sQ, qh, q0, s1, q_stride);
  if constexpr (!KVT) load_kv(0);
  cp_async_commit();

  // Descriptor strides (bytes): along the contiguous dimension one core matrix (128), across 8-row
  // groups 16 x the row's elements. `layout` swaps them per operand kind (a test probes them).
  constexpr uint32_t kAlong = 128, kAcrossK = 16 * HDK, kAcrossV = 16 * HDK;
  const uint32_t k_lbo = (layout & 1) ? kAcrossK : kAlong;
  const uint32_t k_sbo = (layout & 1) ? kAlong : kAcrossK;
  const uint32_t v_lbo = (layout & 2) ? kAlong : kAcrossV;
  const uint32_t v_sbo = (layout & 2) ? kAcrossV : kAlong;

  float o[HD / 2];
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) o[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f}, alpha[2];

  const int wg_first = q0 + wg * kWgRows, wg_last = wg_first + kWgRows - 1;
  const int lim_lo = CAUSAL ? wg_first : s1 - 1, lim_hi = CAUSAL ? wg_last : s1 - 1;
  const int row_a = wg_first + warp * 16 + g, row_b = row_a + 8;
  const int lim_a = CAUSAL ? row_a : s1 - 1, lim_b = CAUSAL ? row_b : s1 - 1;
  const __nv_bfloat16* qw = sQ + wg * kWgRows * HDK;
  auto issue_s = [&](float(&s)[BC / 2], int tile) {
    const __nv_bfloat16* cK = sK + (tile % kStages) * BC * HDK;
#pragma unroll
    for (int kk = 0; kk < HDK / 16; ++kk)
      SsOp<BC>::run(s, smem_desc(qw + kk * 16 * 8, k_lbo, k_sbo),
                    smem_desc(cK + kk * 16 * 8, k_lbo, k_sbo), kk > 0 ? 1 : 0);
  };
  auto issue_pv = [&](const uint32_t(&p)[BC / 16][4], int tile) {
    const __nv_bfloat16* cV = sV + (tile % kStages) * BC * HDK;
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
      RsOp<HD>::run(o, p[kk], smem_desc(cV + kk * 16 * HDK, v_lbo, v_sbo), 1);
  };
  auto key0 = [&](int tile) { return key_base + tile * BC; };
  // Keys of tile j visible to some row of this warpgroup / masked for some row (uniform).
  auto visible = [&](int tile) { return key0(tile) <= lim_hi; };
  auto diagonal = [&](int tile) { return key0(tile) + BC - 1 > lim_lo || key0(tile) < s0; };
  auto softmax = [&](float(&s)[BC / 2], int tile) {
    tile_softmax<BC>(s, diagonal(tile), key0(tile), tig, s0, lim_a, lim_b, scale_log2, m_run, l_run,
                     alpha);
  };

  float s[BC / 2];
#pragma unroll
  for (int i = 0; i < BC / 2; ++i) s[i] = 0.f;  // (overwritten by the first k-step: scale_d 0)
  uint32_t p[BC / 16][4];

  // REFILL: no producer: the last warp to release a stage (its products have read it) issues the
  // copy of the tile two ahead into it, K after S and V after P V, so no warp ever waits for
  // another's release. (A producer warp past the 8 would leave one SM sub-partition three warps:
  // 168 registers a thread, and spills.)
  auto release = [&](int tile, bool is_v) {
    constexpr uint32_t kWarps = kThreads / 32;
    if (lane != 0) return;
    const uint32_t before = atomicAdd(released + (is_v ? kStages : 0) + tile % kStages, 1u);
    if (before % kWarps == kWarps - 1 && tile + kStages < n_tiles) load_tiled(tile + kStages, is_v);
  };
  auto phase = [](int tile) { return static_cast<uint32_t>(tile / kStages) & 1; };
  if constexpr (REFILL && !OVERLAP) {
    cp_async_wait<0>();  // Q
    fence_proxy_async();
    __syncthreads();  // ... and the barriers' initialisation, for every thread
    // Only a warpgroup's last tile can lie past its rows (causal): that tile is never released,
    // and no later tile needs its stage.
    for (int j = 0; j < n_tiles; ++j) {
      if (!visible(j)) break;
      mbar_wait(bar_k(j), phase(j));
      wgmma_fence();
      issue_s(s, j);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(s);
      release(j, false);
      softmax(s, j);
      pack_p<BC>(s, p);
      rescale<HD>(o, alpha);
      mbar_wait(bar_v(j), phase(j));
      wgmma_fence();
      issue_pv(p, j);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(o);
      release(j, true);
    }
  } else if constexpr (!OVERLAP) {
    for (int j = 0; j < n_tiles; ++j) {
      cp_async_wait<0>();   // K_j, V_j (and Q) have landed for this thread's copies
      fence_proxy_async();  // ... and are visible to the async proxy that wgmma reads through
      __syncthreads();      // ... for every thread; every warpgroup is done with tile j - 1
      if (j + 1 < n_tiles) load_kv(j + 1);
      cp_async_commit();
      if (!visible(j)) continue;
      wgmma_fence();
      issue_s(s, j);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(s);
      softmax(s, j);
      pack_p<BC>(s, p);
      rescale<HD>(o, alpha);
      wgmma_fence();
      issue_pv(p, j);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(o);
    }
  } else {
    // Tile 0's scores and softmax first; then per tile j: wait for K/V_{j+1}, start the loads of
    // tile j + 2 (its stage last held tile j - 1, whose product every warpgroup has finished),
    // issue S_{j+1} and P_j V_j, softmax of tile j + 1 while P_j V_j runs, then rescale O. Tiles
    // past the warpgroup's rows (causal) run masked: all their p are 0 and alpha 1. REFILL (two
    // rings): the two stages in use are K_{j+1} and V_j, each released by every warp.
    cp_async_wait<0>();  // Q (and without KVT K/V_0)
    fence_proxy_async();
    __syncthreads();  // (KVT: also the barriers' initialisation)
    if constexpr (KVT) {
      wait_kv(0);  // (REFILL: K_0's barrier)
    } else {
      if (n_tiles > 1) load_kv(1);
      cp_async_commit();
    }
    wgmma_fence();
    issue_s(s, 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s);
    if constexpr (REFILL) release(0, false);
    softmax(s, 0);
    pack_p<BC>(s, p);
    // (The last tile's P V is peeled off the loop: a branch-free body lets ptxas keep the
    // products of one iteration in flight together instead of serialising them.)
    for (int j = 0; j + 1 < n_tiles; ++j) {
      if constexpr (REFILL) {
        mbar_wait(bar_k(j + 1), phase(j + 1));
        mbar_wait(bar_v(j), phase(j));
      } else if constexpr (RELEASE) {
        // Tile j + 2 takes the stage of tile j - 1 once every warp has released it: the
        // ((j + 2) / 3 - 1)-th phase of its empty barrier.
        if (threadIdx.x == 0 && j + 2 < n_tiles) {
          if (j >= 1)
            mbar_wait(empties + static_cast<uint32_t>((j + 2) % kStages) * 8,
                      static_cast<uint32_t>((j + 2) / kStages - 1) & 1);
          load_kv(j + 2);
        }
        wait_kv(j + 1);
      } else if constexpr (KVT) {
        __syncthreads();  // every warpgroup is done with tile j - 1: its stage takes tile j + 2
        if (threadIdx.x == 0 && j + 2 < n_tiles) load_kv(j + 2);
        wait_kv(j + 1);
      } else {
        cp_async_wait<0>();  // K_{j+1}, V_{j+1}
        fence_proxy_async();
        __syncthreads();
        if (j + 2 < n_tiles) load_kv(j + 2);
        cp_async_commit();
      }
      wgmma_fence();
      issue_s(s, j + 1);
      wgmma_commit();
      issue_pv(p, j);
      wgmma_commit();
      wgmma_wait<1>();  // S_{j+1} (committed first); P_j V_j may still run
      fence_regs(s);
      if constexpr (REFILL) release(j + 1, false);
      softmax(s, j + 1);
      wgmma_wait<0>();
      fence_regs(o);
      if constexpr (REFILL)
        release(j, true);
      else if constexpr (RELEASE)  // done with K_j and V_j (S_j waited for last iteration)
        if (lane == 0) mbar_arrive(empties + static_cast<uint32_t>(j % kStages) * 8);
      rescale<HD>(o, alpha);
      pack_p<BC>(s, p);  // p is free: P_j V_j has read it
    }
    if constexpr (REFILL) mbar_wait(bar_v(n_tiles - 1), phase(n_tiles - 1));
    wgmma_fence();
    issue_pv(p, n_tiles - 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);
  }
  cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
  }
  const float inv0 = 1.f / l_run[0], inv1 = 1.f / l_run[1];
  __nv_bfloat16* oh = out + static_cast<size_t>(h) * HD;
  const int row_end = min(q0 + kBr, s1);
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt) {
    const int col = nt * 8 + tig * 2;
    if (row_a < row_end)
      *reinterpret_cast<__nv_bfloat162*>(oh + static_cast<size_t>(row_a) * q_stride + col) =
          __floats2bfloat162_rn(o[4 * nt + 0] * inv0, o[4 * nt + 1] * inv0);
    if (row_b < row_end)
      *reinterpret_cast<__nv_bfloat162*>(oh + static_cast<size_t>(row_b) * q_stride + col) =
          __floats2bfloat162_rn(o[4 * nt + 2] * inv1, o[4 * nt + 3] * inv1);
  }
#else
  (void)q, (void)k, (void)v, (void)out, (void)T, (void)n_heads, (void)group, (void)scale_log2,
      (void)tiles, (void)layout, (void)kv_head_blocks;
  __trap();  // never launched: the host dispatches here only on an sm_90 device (wgmma_supported)
#endif
}

template <int HD, int BC, bool CAUSAL, bool OVERLAP, int WG, int KV>
void launch_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                   __nv_bfloat16* out, int T, int n_heads, int n_kv_heads, int grid_x,
                   float scale_log2, const int4* tiles, int layout, int kv_head_blocks,
                   cudaStream_t stream) {
  // Slack past the tiles: on the H200 the kernel faulted ("illegal memory access") with exactly
  // the tiles' bytes although its results are right with slack (session 11: the probe at hd 64
  // with 32 KiB of slack matched the reference): the asynchronous proxy appears to read past the
  // last V tile. kSlack keeps every read inside the CTA (a probe's wrong convention's too).
  const size_t smem = wgmma_smem_bytes(HD, BC, OVERLAP, WG, KV != 0) + kSlack;
  auto* kernel = flash_wgmma_kernel<HD, BC, CAUSAL, OVERLAP, WG, KV>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess)
    throw std::runtime_error("attention_core_bf16 (wgmma): cannot get " + std::to_string(smem) +
                             " bytes of shared memory: " + cudaGetErrorString(e));
  kernel<<<attention_grid(grid_x, n_heads), threads(WG), smem, stream>>>(
      q, k, v, out, T, n_heads, n_heads / n_kv_heads, scale_log2, tiles, layout, kv_head_blocks);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <int HD, bool OVERLAP, int WG, int KV = 0>
void launch_hd(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
               __nv_bfloat16* out, int T, int n_heads, int n_kv_heads, const AttnSequences* seqs,
               int layout, cudaStream_t stream) {
  constexpr int BC = 64;
  const int4* tl = tile_table(seqs);
  const int grid_x = tl ? seqs->tile_slots : (T + br(WG) - 1) / br(WG);
  const float sl2 = log2_score_scale(seqs, HD);  // the mma.sync kernel's, bit for bit
  const int hb = tl && KV ? seqs->kv_head_blocks : 0;
  if (is_causal(seqs))
    launch_kernel<HD, BC, true, OVERLAP, WG, KV>(q, k, v, out, T, n_heads, n_kv_heads, grid_x, sl2,
                                                 tl, layout, hb, stream);
  else
    launch_kernel<HD, BC, false, OVERLAP, WG, KV>(q, k, v, out, T, n_heads, n_kv_heads, grid_x, sl2,
                                                  tl, layout, hb, stream);
}

// sm_90 exactly: the binary's sm_90a code (wgmma is not in the sm_90 PTX it also carries).
bool device_is_sm90() {
  return device_attribute(DeviceAttr::CcMajor) == 9 && device_attribute(DeviceAttr::CcMinor) == 0;
}

}  // namespace

bool wgmma_attention_built(int head_dim, bool overlap, int warpgroups, bool kv_tiled) {
  if (kv_tiled)
    return warpgroups == 4 ? overlap && (head_dim == 72 || head_dim == 80)
                           : warpgroups == 2 && head_dim == 256;
  if (warpgroups == 4) return overlap && (head_dim == 64 || head_dim == 72 || head_dim == 80);
  if (warpgroups != 2) return false;
  if (overlap) return head_dim == 64 || head_dim == 72 || head_dim == 80 || head_dim == 128;
  return head_dim == 64 || head_dim == 72 || head_dim == 80 || head_dim == 128 || head_dim == 256;
}

bool wgmma_attention_supported(int head_dim, bool overlap, int warpgroups, bool kv_tiled) {
  if (!wgmma_attention_built(head_dim, overlap, warpgroups, kv_tiled)) return false;
  return device_is_sm90() &&
         wgmma_smem_bytes(head_dim, 64, overlap, warpgroups, kv_tiled) + kSlack <=
             device_smem_optin();
}

int wgmma_attention_rows_per_tile(int warpgroups) {
  return br(warpgroups);
}

void attention_core_bf16_wgmma(bool overlap, int warpgroups, const __nv_bfloat16* q,
                               const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* out,
                               int T, int n_heads, int n_kv_heads, int head_dim,
                               cudaStream_t stream, const AttnSequences* seqs) {
  if (warpgroups == 2)  // (the probe checks the arguments)
    return attention_wgmma_probe(overlap, kWgmmaLayout, q, k, v, out, T, n_heads, n_kv_heads,
                                 head_dim, stream, seqs);
  check_shape(T, n_heads, n_kv_heads, head_dim);
  check_sequences(seqs);
  if (!wgmma_attention_supported(head_dim, overlap, warpgroups))
    throw std::invalid_argument("attention_core_bf16: no wgmma kernel of " +
                                std::to_string(warpgroups) + " warpgroups for head_dim " +
                                std::to_string(head_dim) + " on this device");
  if (T == 0) return;
  if (head_dim == 64)
    return launch_hd<64, true, 4>(q, k, v, out, T, n_heads, n_kv_heads, seqs, kWgmmaLayout, stream);
  if (head_dim == 72)
    return launch_hd<72, true, 4>(q, k, v, out, T, n_heads, n_kv_heads, seqs, kWgmmaLayout, stream);
  return launch_hd<80, true, 4>(q, k, v, out, T, n_heads, n_kv_heads, seqs, kWgmmaLayout, stream);
}

void attention_core_bf16_wgmma_kv_tiled(bool overlap, int warpgroups, const __nv_bfloat16* q,
                                        const __nv_bfloat16* k_tiles, const __nv_bfloat16* v_tiles,
                                        __nv_bfloat16* out, int T, int n_heads, int n_kv_heads,
                                        int head_dim, cudaStream_t stream,
                                        const AttnSequences* seqs, bool release_barriers) {
  check_shape(T, n_heads, n_kv_heads, head_dim);
  check_sequences(seqs);
  if (!wgmma_attention_supported(head_dim, overlap, warpgroups, true) ||
      (warpgroups == 2 && !release_barriers))
    throw std::invalid_argument("attention_core_bf16: no key-tiled wgmma kernel for head_dim " +
                                std::to_string(head_dim) + " on this device");
  if ((reinterpret_cast<uintptr_t>(k_tiles) | reinterpret_cast<uintptr_t>(v_tiles)) % 16 != 0)
    throw std::invalid_argument("attention_core_bf16: key tiles must be 16-byte aligned");
  if (T == 0) return;
  if (head_dim == 256 && overlap)  // (supported: two warpgroups, released stage by stage)
    return launch_hd<256, true, 2, 2>(q, k_tiles, v_tiles, out, T, n_heads, n_kv_heads, seqs,
                                      kWgmmaLayout, stream);
  if (head_dim == 256)
    return launch_hd<256, false, 2, 2>(q, k_tiles, v_tiles, out, T, n_heads, n_kv_heads, seqs,
                                       kWgmmaLayout, stream);
#define CLEF_TILED(HD, KV)                                                                    \
  if (head_dim == HD && (KV == 2) == release_barriers)                                        \
    return launch_hd<HD, true, 4, KV>(q, k_tiles, v_tiles, out, T, n_heads, n_kv_heads, seqs, \
                                      kWgmmaLayout, stream);
  CLEF_TILED(72, 1)
  CLEF_TILED(72, 2)
  CLEF_TILED(80, 1)
  CLEF_TILED(80, 2)
#undef CLEF_TILED
  throw std::invalid_argument("attention_core_bf16: no key-tiled wgmma kernel for head_dim " +
                              std::to_string(head_dim));
}

void attention_wgmma_probe(bool overlap, int layout, const __nv_bfloat16* q, const __nv_bfloat16* k,
                           const __nv_bfloat16* v, __nv_bfloat16* out, int T, int n_heads,
                           int n_kv_heads, int head_dim, cudaStream_t stream,
                           const AttnSequences* seqs) {
  check_shape(T, n_heads, n_kv_heads, head_dim);
  check_sequences(seqs);
  if (!wgmma_attention_supported(head_dim, overlap, 2))
    throw std::invalid_argument("attention_core_bf16: no wgmma kernel for head_dim " +
                                std::to_string(head_dim) + (overlap ? " (overlapped)" : "") +
                                " on this device");
  if (T == 0) return;
#define CLEF_WG_CASE(HD, OV)           \
  if (head_dim == HD && overlap == OV) \
    return launch_hd<HD, OV, 2>(q, k, v, out, T, n_heads, n_kv_heads, seqs, layout, stream);
  CLEF_WG_CASE(64, false)
  CLEF_WG_CASE(72, false)
  CLEF_WG_CASE(80, false)
  CLEF_WG_CASE(128, false)
  CLEF_WG_CASE(256, false)
  CLEF_WG_CASE(64, true)
  CLEF_WG_CASE(72, true)
  CLEF_WG_CASE(80, true)
  CLEF_WG_CASE(128, true)
#undef CLEF_WG_CASE
  throw std::invalid_argument("attention_core_bf16: no wgmma kernel for head_dim " +
                              std::to_string(head_dim));
}

}  // namespace clef::engine::cuda

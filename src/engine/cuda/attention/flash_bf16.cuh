// The bf16 flash-attention kernel (mma.sync m16n8k16, fp32 online softmax) and its launcher,
// shared by attention_core.cu (the default shapes, every head dim) and attention_variants.cu (the
// pipelined / register-Q variants, a few head dims): one template, so each translation unit
// instantiates only what it dispatches to. Internal to attention/; see attention_core.h for the
// contract and tuning.h for the variants.
//
// One CTA of 4 (or 8) warps per (query tile, query head); each warp owns 16 (or 32) query rows.
// Key/value tiles of 64 rows stream through shared memory with cp.async. One stage (the default):
// the V load of tile j overlaps S = Q K_j^T and the K load of tile j+1 overlaps O += P V_j
// (FlashAttention-2 ordering), so one buffer each for Q, K and V suffices: 3 x 64 x (hd + 8) bf16 =
// 99 KiB at hd 256, which also fits sm_86/sm_89 (99 KiB opt-in) and lets two CTAs share an
// sm_80/sm_90 SM. Rows span an odd number of 16-byte chunks (padded by one where hd / 8 is even) so
// ldmatrix reads are bank-conflict free. Matrix products: mma.sync m16n8k16 bf16 -> fp32, plus one
// m16n8k8 step for a head dim that is an odd multiple of 8 (72, the vision tower's, unpadded);
// softmax in fp32 with exp2 and a running max. Causal and
// non-causal are separate instantiations (CAUSAL), as are the variants (STAGES, QREG, MT); the
// default kernels do the same arithmetic in the same order as before the variants existed (their
// register counts moved by one at most: sm_90a, hd 80 and 256).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_attributes.h"
#include "engine/cuda/mma_sync.cuh"

namespace clef::engine::cuda::flash {
constexpr int kBc = 64;  // key rows per tile

// The head dims both kernels are instantiated for (CLEF_HEAD_DIM_CASES below): multiples of 32,
// 72 (the vision tower's own) and 80 (other models; CLEF_ATTN_PICK timing). The bf16 kernel takes
// any multiple of 8; each one instantiated costs compile time, so only these.
inline bool supported_head_dim(int head_dim) {
  return head_dim > 0 && head_dim <= 256 &&
         (head_dim % 32 == 0 || head_dim == 72 || head_dim == 80);
}

inline void check_shape(int T, int n_heads, int n_kv_heads, int head_dim) {
  if (T < 0 || n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    throw std::invalid_argument("attention_core: bad head counts (" + std::to_string(n_heads) +
                                " / " + std::to_string(n_kv_heads) + ") or T " + std::to_string(T));
  if (!supported_head_dim(head_dim))
    throw std::invalid_argument("attention_core: head_dim " + std::to_string(head_dim) +
                                " is not 72, 80 or a multiple of 32 in [32, 256] (zero-pad it to "
                                "attention_padded_head_dim)");
}

inline void check_sequences(const AttnSequences* seqs) {
  if (!seqs) return;
  const bool table_ok =
      seqs->tiles ? seqs->tile_slots >= 1 && reinterpret_cast<uintptr_t>(seqs->tiles) % 16 == 0
                  : seqs->tile_slots == 0 && seqs->kv_head_blocks == 0;
  if (!table_ok || seqs->kv_head_blocks < 0)
    throw std::invalid_argument("attention_core: bad packed-sequence tile table");
  if (!std::isfinite(seqs->scale) || seqs->scale < 0.f)
    throw std::invalid_argument("attention_core: score scale " + std::to_string(seqs->scale) +
                                " is not finite and >= 0");
}

// The score scale of a call: the caller's, or 1/sqrt(head_dim) (computed as before the scale field
// existed, so default callers get the same bits).
inline float score_scale(const AttnSequences* seqs, int head_dim) {
  return seqs && seqs->scale != 0.f ? seqs->scale : 1.f / sqrtf(static_cast<float>(head_dim));
}
inline bool is_causal(const AttnSequences* seqs) {
  return !seqs || seqs->causal;
}
inline const int4* tile_table(const AttnSequences* seqs) {
  return seqs ? reinterpret_cast<const int4*>(seqs->tiles) : nullptr;
}

// The attention grids are (heads, query tiles): CTAs start in linear order, so one tile of every
// head starts before the next tile of any, and with the tiles heaviest first the grid ends on the
// lightest tiles of all heads instead of the heaviest tiles of the last head (a one-CTA-an-SM
// kernel's tail: perf-log v38a).
__device__ __forceinline__ int cta_head() {
  return blockIdx.x;
}
__device__ __forceinline__ int cta_tile() {
  return blockIdx.y;
}
inline dim3 attention_grid(int tiles, int n_heads) {
  if (tiles > 65535) throw std::invalid_argument("attention: more query tiles than a grid's y");
  return dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(tiles));
}

// This CTA's query rows [q0, q0 + rows) of its sequence [s0, s1): the tile table's slot cta_tile()
// (false for an unused slot), or without a table one sequence of T rows, heaviest (last) query
// tile first.
__device__ __forceinline__ bool cta_rows(const int4* tiles, int rows, int T, int& q0, int& s0,
                                         int& s1) {
  if (tiles) {
    const int4 tl = tiles[cta_tile()];
    if (tl.x < 0) return false;
    q0 = tl.x, s0 = tl.y, s1 = tl.z;
  } else {
    q0 = (gridDim.y - 1 - cta_tile()) * rows, s0 = 0, s1 = T;
  }
  return true;
}

// The shared-memory row stride (elements) of a head dim: an odd number of 16-byte chunks, so the
// 8 rows one ldmatrix 8x8 matrix reads start in 8 different 4-bank groups (hd 80: 88 = 11 chunks;
// hd 72: 72 = 9 chunks as is, where 80 would be 10 and conflict 2-way).
constexpr int smem_stride(int head_dim) {
  return (head_dim / 8) % 2 == 1 ? head_dim : head_dim + 8;
}

// Loads rows [row0, row0 + ROWS) of a [T, heads, HD] tensor's head into a padded smem tile.
template <int HD, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile(__nv_bfloat16* tile, const __nv_bfloat16* base, int row0,
                                          int T, int row_stride) {
  constexpr int kChunksPerRow = HD / 8;  // 16-byte chunks
  constexpr int kStride = smem_stride(HD);
  for (int c = threadIdx.x; c < ROWS * kChunksPerRow; c += THREADS) {
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const int row = row0 + r;
    const bool ok = row < T;
    const __nv_bfloat16* src = base + static_cast<size_t>(ok ? row : 0) * row_stride + col;
    cp_async16(tile + r * kStride + col, src, ok ? 16 : 0);
  }
}

// Shared memory of one CTA: Q (rows query rows), STAGES buffers each of K and V (kBc rows), rows
// of smem_stride elements.
constexpr size_t bf16_smem_bytes(int head_dim, int rows, int stages) {
  return static_cast<size_t>(rows + 2 * stages * kBc) * smem_stride(head_dim) * 2;
}

// CTAs per SM the compiler budgets registers for (__launch_bounds__). The default (one stage, one
// m-tile): two CTAs of 4 warps (99 KiB smem at hd 256, which fits sm_86/89 too), one of 8. Two
// m-tiles a warp: twice the accumulators, so two CTAs of 4 warps (255 registers), one of 8. Two
// stages, one m-tile: as many as sm_90's 227 KiB of shared memory holds, at most 3 of 4 warps
// (170 registers a thread) or 2 of 8 (128).
constexpr int bf16_min_blocks(int head_dim, int warps, int mt, int stages) {
  if (mt == 2) return warps == 4 ? 2 : 1;
  if (stages == 1) return warps == 4 ? 2 : 1;
  const int fit =
      static_cast<int>(227 * 1024 / (bf16_smem_bytes(head_dim, warps * 16, stages) + 1024));
  const int cap = warps == 4 ? 3 : 2;
  return fit < 1 ? 1 : fit > cap ? cap : fit;
}

// WARPS warps of 16 * MT query rows each: Br = 16 * MT * WARPS query rows per CTA. MT 1, 4 warps
// (the default: 99 KiB smem at hd 256, two CTAs per SM, fits sm_86/sm_89) or 8 warps
// (FlashAttention-2's Hopper/A100 shape at hd 256: 132 KiB, one CTA per SM, each K/V tile serves
// twice the rows). MT 2 (FlashAttention-2's shape at hd <= 128): each K/V fragment read from
// shared memory feeds two MMAs instead of one, halving the ldmatrix traffic per MMA (at MT 1 the
// ldmatrix reads, 512 B each at 128 B/clock, outlast the MMAs they feed).
// STAGES 1: one buffer each for K and V, the V load of tile j overlapping S = Q K_j^T and the K
// load of tile j+1 overlapping P V_j (four barriers a tile). STAGES 2: K_{j+1} and V_{j+1} load
// into the other buffer pair while tile j computes (one barrier a tile; needs sm_90-class shared
// memory at large head dims). QREG: each warp's Q A-fragments are read from shared memory once,
// before the key loop, instead of once per key tile (MT * HD / 4 registers more). RSKIP: the
// rescale of O is skipped when no row of the warp moved its max (alpha exactly 1, so exact), one
// warp vote against MT * HD / 2 multiplications a tile. HD: a multiple of 8; an odd multiple
// (72) ends QK^T with one m16n8k8 step and P V with one ldmatrix.x2.trans n-tile.
template <int HD, int WARPS, bool CAUSAL, int STAGES = 1, bool QREG = false, int MT = 1,
          bool RSKIP = false>
__global__ void __launch_bounds__(WARPS * 32, bf16_min_blocks(HD, WARPS, MT, STAGES))
    flash_attn_bf16_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                           const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ out,
                           int T, int n_heads, int group, float scale_log2,
                           const int4* __restrict__ tiles) {
  static_assert(STAGES == 1 || STAGES == 2, "one or two K/V stages");
  static_assert(MT == 1 || MT == 2, "one or two m-tiles of 16 rows a warp");
  static_assert(HD % 8 == 0 && HD >= 16, "head dim: a multiple of 8 (cp.async rows of 16 bytes)");
  constexpr int kThreads = WARPS * 32;
  constexpr int kWr = 16 * MT;  // query rows per warp
  constexpr int kBr = WARPS * kWr;
  constexpr int kStride = smem_stride(HD);
  constexpr int kNT = HD / 8;           // output n-tiles of 8 columns per m-tile
  constexpr int kK16 = HD / 16;         // QK^T k16 steps
  constexpr bool kTail = HD % 16 != 0;  // ... then one k8 step (columns kK16 * 16 ..)
  // Skipping sub-tiles past a warp's rows is kept for the 8-warp shape only (two diagonal key tiles
  // per CTA, the second wholly past half of its warps); in the 4-warp shape the runtime tests
  // inside the unrolled MMA loops appeared to cost more than they saved (H200, T 5661: 190 TFLOP/s
  // without, 178 with; one run each, on two machines), so masking alone handles its single diagonal
  // tile. Non-causal, the same test skips the sub-tiles past the sequence's last key.
  constexpr bool kSkip = WARPS == 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* sK = sQ + kBr * kStride;
  __nv_bfloat16* sV = sK + STAGES * kBc * kStride;

  // This CTA's query rows [q0, q0 + kBr) of the sequence [s0, s1). One sequence: heaviest (last)
  // query tiles first, as causal work grows with the tile index; packed: the table's order (which
  // the host sorts heaviest first).
  int q0, s0, s1;
  if (!cta_rows(tiles, kBr, T, q0, s0, s1)) return;  // an unused slot
  const int h = cta_head();
  const int kvh = h / group;
  const int n_kv = n_heads / group;
  const int q_stride = n_heads * HD, kv_stride = n_kv * HD;
  const __nv_bfloat16* qh = q + static_cast<size_t>(h) * HD;
  const __nv_bfloat16* kh = k + static_cast<size_t>(kvh) * HD;
  const __nv_bfloat16* vh = v + static_cast<size_t>(kvh) * HD;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;

  load_tile<HD, kBr, kThreads>(sQ, qh, q0, s1, q_stride);
  if constexpr (QREG) cp_async_commit();  // Q alone in the first group: read before the loop
  load_tile<HD, kBc, kThreads>(sK, kh, s0, s1, kv_stride);
  if constexpr (STAGES == 2) load_tile<HD, kBc, kThreads>(sV, vh, s0, s1, kv_stride);
  cp_async_commit();
  // QREG: this warp's Q fragments, per m-tile and 16-column k-step (and the k8 tail's).
  uint32_t qf[QREG ? MT : 1][QREG ? kK16 : 1][4];
  uint32_t qt[QREG && kTail ? MT : 1][2];
  if constexpr (QREG) {
    cp_async_wait<1>();  // Q has landed (K_0, V_0 may still be in flight)
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int kk = 0; kk < kK16; ++kk)
        ldmatrix_x4(qf[mt][kk],
                    sQ + (warp * kWr + mt * 16 + lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
      if constexpr (kTail)
        ldmatrix_x2(qt[mt], sQ + (warp * kWr + mt * 16 + lane % 16) * kStride + kK16 * 16);
    }
  }

  float o[MT][kNT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < kNT; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  // Running max (log2 domain) and row sum for rows g and g + 8 of each m-tile.
  float m_run[MT][2], l_run[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    m_run[mt][0] = m_run[mt][1] = -INFINITY, l_run[mt][0] = l_run[mt][1] = 0.f;

  // Keys s0..last_key: causal, up to the tile's last row; non-causal, the whole sequence.
  const int last_key = CAUSAL ? min(q0 + kBr, s1) - 1 : s1 - 1;
  const int n_tiles = (last_key - s0) / kBc + 1;
  const int warp_first = q0 + warp * kWr;  // this warp's kWr query rows
  const int warp_last = warp_first + kWr - 1;
  // The last key each row sees (keys past it are masked): causal, the row itself; non-causal, the
  // sequence's last key. lim_lo / lim_hi: the smallest / largest of them in this warp. This
  // thread's rows: warp_first + mt * 16 + g (+ 8).
  const int lim_lo = CAUSAL ? warp_first : s1 - 1, lim_hi = CAUSAL ? warp_last : s1 - 1;

  for (int j = 0; j < n_tiles; ++j) {
    const __nv_bfloat16* cK = sK;  // this tile's K and V buffers
    const __nv_bfloat16* cV = sV;
    if constexpr (STAGES == 1) {
      load_tile<HD, kBc, kThreads>(sV, vh, s0 + j * kBc, s1, kv_stride);
      cp_async_commit();
      cp_async_wait<1>();  // Q and K_j have landed
      __syncthreads();
    } else {
      cp_async_wait<0>();  // K_j and V_j (issued one tile ago) have landed
      __syncthreads();     // ... for every thread, and every warp is done with tile j - 1's buffers
      if (j + 1 < n_tiles) {
        const int nb = ((j + 1) % 2) * kBc * kStride;
        load_tile<HD, kBc, kThreads>(sK + nb, kh, s0 + (j + 1) * kBc, s1, kv_stride);
        load_tile<HD, kBc, kThreads>(sV + nb, vh, s0 + (j + 1) * kBc, s1, kv_stride);
      }
      cp_async_commit();
      cK = sK + (j % 2) * kBc * kStride;
      cV = sV + (j % 2) * kBc * kStride;
    }

    const int key0 = s0 + j * kBc;
    // Warp-uniform: does any key of this tile precede one of the warp's rows' limits / pass one?
    const bool active = key0 <= lim_hi;
    const bool diagonal = key0 + kBc - 1 > lim_lo;
    uint32_t p[MT][4][4];  // P as A fragments, per m-tile and 16-key k-step
    if (active) {
      // S = Q K_j^T for this warp's kWr rows x 64 keys.
      float s[MT][8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kK16; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (QREG) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a[mt][i] = qf[mt][kk][i];
          } else {
            ldmatrix_x4(a[mt], sQ + (warp * kWr + mt * 16 + lane % 16) * kStride + kk * 16 +
                                   (lane / 16) * 8);
          }
        }
#pragma unroll
        for (int np = 0; np < 4; ++np) {                   // pairs of 8-key n-tiles
          if (kSkip && key0 + np * 16 > lim_hi) continue;  // keys past all of the warp's limits
          uint32_t b[4];
          ldmatrix_x4(b, cK + (np * 16 + lane % 8 + (lane / 16) * 8) * kStride + kk * 16 +
                             ((lane / 8) % 2) * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(s[mt][2 * np], a[mt], b[0], b[1]);
            mma_bf16(s[mt][2 * np + 1], a[mt], b[2], b[3]);
          }
        }
      }
      if constexpr (kTail) {  // columns kK16 * 16 .. HD - 1: one m16n8k8 step per 8-key n-tile
        uint32_t a[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (QREG) {
            a[mt][0] = qt[mt][0], a[mt][1] = qt[mt][1];
          } else {
            ldmatrix_x2(a[mt], sQ + (warp * kWr + mt * 16 + lane % 16) * kStride + kK16 * 16);
          }
        }
#pragma unroll
        for (int nq = 0; nq < 2; ++nq) {  // quads of 8-key n-tiles: one x4 load of 32 keys each
          // (Sub-tiles skipped above and computed here hold partial sums: masked all the same.)
          if (kSkip && key0 + nq * 32 > lim_hi) continue;
          uint32_t b[4];
          ldmatrix_x4(b, cK + (nq * 32 + lane) * kStride + kK16 * 16);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) mma_bf16_k8(s[mt][nq * 4 + i], a[mt], b[i]);
        }
      }

#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int row_a = warp_first + mt * 16 + g, row_b = row_a + 8;
        const int lim_a = CAUSAL ? row_a : s1 - 1, lim_b = CAUSAL ? row_b : s1 - 1;
        // Mask the keys past each row's limit (causal: this also covers keys >= s1, which only
        // exist past the last row; non-causal: the zero-filled keys >= s1 of the last tile).
        if (diagonal) {
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            const int key = key0 + nt * 8 + tig * 2;
            if (key > lim_a) s[mt][nt][0] = -INFINITY;
            if (key + 1 > lim_a) s[mt][nt][1] = -INFINITY;
            if (key > lim_b) s[mt][nt][2] = -INFINITY;
            if (key + 1 > lim_b) s[mt][nt][3] = -INFINITY;
          }
        }

        // Online softmax (log2 domain). Key s0 is visible to every row, so after tile 0 the max
        // is finite; a row with no visible key in a later tile keeps its state (p = 0, alpha = 1)
        // (causal only: non-causal, key0 < s1 is visible to every row in every tile).
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          mx[0] = fmaxf(mx[0], fmaxf(s[mt][nt][0], s[mt][nt][1]));
          mx[1] = fmaxf(mx[1], fmaxf(s[mt][nt][2], s[mt][nt][3]));
        }
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
          const float m_new = fmaxf(m_run[mt][r], mx[r] * scale_log2);
          alpha[r] = (m_new == -INFINITY) ? 1.f : exp2f(m_run[mt][r] - m_new);
          m_run[mt][r] = m_new;
        }
        const float mb0 = m_run[mt][0] == -INFINITY ? 0.f : m_run[mt][0];
        const float mb1 = m_run[mt][1] == -INFINITY ? 0.f : m_run[mt][1];
        float rs[2] = {0.f, 0.f};
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const float p0 = exp2f(s[mt][nt][0] * scale_log2 - mb0);
          const float p1 = exp2f(s[mt][nt][1] * scale_log2 - mb0);
          const float p2 = exp2f(s[mt][nt][2] * scale_log2 - mb1);
          const float p3 = exp2f(s[mt][nt][3] * scale_log2 - mb1);
          rs[0] += p0 + p1;
          rs[1] += p2 + p3;
          p[mt][nt / 2][(nt % 2) * 2 + 0] = pack_bf16(p0, p1);
          p[mt][nt / 2][(nt % 2) * 2 + 1] = pack_bf16(p2, p3);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) l_run[mt][r] = l_run[mt][r] * alpha[r] + rs[r];
        if (!RSKIP || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
          for (int i = 0; i < kNT; ++i) {
            o[mt][i][0] *= alpha[0];
            o[mt][i][1] *= alpha[0];
            o[mt][i][2] *= alpha[1];
            o[mt][i][3] *= alpha[1];
          }
        }
      }
    }

    if constexpr (STAGES == 1) {
      __syncthreads();  // every warp is done with sK
      if (j + 1 < n_tiles) load_tile<HD, kBc, kThreads>(sK, kh, s0 + (j + 1) * kBc, s1, kv_stride);
      cp_async_commit();
      cp_async_wait<1>();  // V_j has landed
      __syncthreads();
    }

    // O += P V_j.
    if (active) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        if (kSkip && key0 + kk * 16 > lim_hi) continue;  // P is exactly 0 there (masked)
#pragma unroll
        for (int np = 0; np < kNT / 2; ++np) {  // pairs of 8-column n-tiles
          uint32_t b[4];
          ldmatrix_x4_trans(b, cV + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kStride +
                                   np * 16 + (lane / 16) * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(o[mt][2 * np], p[mt][kk], b[0], b[1]);
            mma_bf16(o[mt][2 * np + 1], p[mt][kk], b[2], b[3]);
          }
        }
        if constexpr (kNT % 2 == 1) {  // the odd last n-tile: one 16 x 8 block of V
          uint32_t b[2];
          ldmatrix_x2_trans(
              b, cV + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kStride + (kNT - 1) * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) mma_bf16(o[mt][kNT - 1], p[mt][kk], b[0], b[1]);
        }
      }
    }
    if constexpr (STAGES == 1)
      __syncthreads();  // every warp is done with sV before the next V load
  }
  cp_async_wait<0>();

  // Normalise and store (row sums reduced over the quad that shares a row).
  __nv_bfloat16* oh = out + static_cast<size_t>(h) * HD;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l_run[mt][r] += __shfl_xor_sync(0xffffffffu, l_run[mt][r], 1);
      l_run[mt][r] += __shfl_xor_sync(0xffffffffu, l_run[mt][r], 2);
    }
    const float inv0 = 1.f / l_run[mt][0], inv1 = 1.f / l_run[mt][1];
    const int row_a = warp_first + mt * 16 + g, row_b = row_a + 8;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int col = nt * 8 + tig * 2;
      if (row_a < s1)
        *reinterpret_cast<__nv_bfloat162*>(oh + static_cast<size_t>(row_a) * q_stride + col) =
            __floats2bfloat162_rn(o[mt][nt][0] * inv0, o[mt][nt][1] * inv0);
      if (row_b < s1)
        *reinterpret_cast<__nv_bfloat162*>(oh + static_cast<size_t>(row_b) * q_stride + col) =
            __floats2bfloat162_rn(o[mt][nt][2] * inv1, o[mt][nt][3] * inv1);
    }
  }
}

// The opt-in shared memory per block of the current device (device_attributes.h, cached per
// device): what a variant's shared memory is checked against.
size_t device_smem_optin();

// The score scale in the log2 domain of one launch: the caller's scale times log2(e) rounded once,
// or the default 1/sqrt(head_dim) folded into the constant in fp32 (the same bits as always).
inline float log2_score_scale(const AttnSequences* seqs, int head_dim) {
  return seqs && seqs->scale != 0.f
             ? static_cast<float>(1.4426950408889634 * static_cast<double>(seqs->scale))
             : 1.4426950408889634f / sqrtf(static_cast<float>(head_dim));
}

// Launches one instantiation; a shared-memory need past the device's opt-in limit (a 2-stage
// variant on sm_86/89) is refused with std::invalid_argument before anything runs.
template <int HD, int WARPS, bool CAUSAL, int STAGES, bool QREG, int MT, bool RSKIP>
void launch_bf16_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                        __nv_bfloat16* out, int T, int n_heads, int n_kv_heads, int grid_x,
                        float scale_log2, const int4* tiles, cudaStream_t stream) {
  constexpr size_t smem = bf16_smem_bytes(HD, 16 * MT * WARPS, STAGES);
  auto* kernel = flash_attn_bf16_kernel<HD, WARPS, CAUSAL, STAGES, QREG, MT, RSKIP>;
  if constexpr (STAGES > 1 || MT > 1) {  // beyond the default shapes
    const size_t optin = device_smem_optin();
    if (smem > optin)
      throw std::invalid_argument("attention_core_bf16: this variant needs " +
                                  std::to_string(smem) + " bytes of shared memory, the device " +
                                  std::to_string(optin));
  }
  // Opting in is per function and cheap; repeating it keeps this free of global state.
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess)
    throw std::runtime_error("attention_core_bf16: cannot get " + std::to_string(smem) +
                             " bytes of shared memory: " + cudaGetErrorString(e));
  kernel<<<attention_grid(grid_x, n_heads), WARPS * 32, smem, stream>>>(
      q, k, v, out, T, n_heads, n_heads / n_kv_heads, scale_log2, tiles);
  CLEF_CUDA_LAUNCH_CHECK();
}

// One (head dim, shape, stages, Q placement, m-tiles, rescale skip): the scale and the grid for the
// call, causal or not.
template <int HD, int WARPS, int STAGES = 1, bool QREG = false, int MT = 1, bool RSKIP = false>
void launch_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                 __nv_bfloat16* out, int T, int n_heads, int n_kv_heads, const AttnSequences* seqs,
                 cudaStream_t stream) {
  constexpr int kBr = WARPS * 16 * MT;
  const int4* tiles = tile_table(seqs);
  const int grid_x = tiles ? seqs->tile_slots : (T + kBr - 1) / kBr;
  const float sl2 = log2_score_scale(seqs, HD);
  if (is_causal(seqs))
    launch_bf16_kernel<HD, WARPS, true, STAGES, QREG, MT, RSKIP>(
        q, k, v, out, T, n_heads, n_kv_heads, grid_x, sl2, tiles, stream);
  else
    launch_bf16_kernel<HD, WARPS, false, STAGES, QREG, MT, RSKIP>(
        q, k, v, out, T, n_heads, n_kv_heads, grid_x, sl2, tiles, stream);
}

}  // namespace clef::engine::cuda::flash

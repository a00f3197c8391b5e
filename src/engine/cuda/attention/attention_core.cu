// GQA flash attention, causal or non-causal per packed sequence (see attention_core.h): the entry
// points, the default bf16 kernel shapes (flash_bf16.cuh, one stage, every head dim) and the fp32
// parity kernel.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/flash_bf16.cuh"
#include "engine/cuda/attention/tuning.h"
#include "engine/cuda/cuda_check.h"

namespace clef::engine::cuda {
namespace {

using namespace flash;

// ---- fp32 (parity) kernel ---------------------------------------------------------------------
// One CTA of 128 threads per (32-query tile, head); thread t owns query row t / 4 and, within it,
// every fourth key of a 32-key tile (scores) and every fourth output column (accumulators). K and V
// tiles share one smem buffer (loaded one after the other): simple, and fast enough for a parity
// mode.
constexpr int kFBr = 32;
constexpr int kFBc = 32;
constexpr int kFThreads = 128;

template <int HD, bool CAUSAL>
__global__ void __launch_bounds__(kFThreads)
    flash_attn_f32_kernel(const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, float* __restrict__ out, int T, int n_heads,
                          int group, float scale, const int4* __restrict__ tiles) {
  constexpr int kS = HD + 1;  // padded rows: threads of a warp read 4 different rows at one column
  extern __shared__ float fsm[];
  float* sQ = fsm;              // [kFBr][kS]
  float* sKV = sQ + kFBr * kS;  // [kFBc][kS]
  float* sP = sKV + kFBc * kS;  // [kFBr][kFBc + 1]

  int q0, s0, s1;  // query rows [q0, q0 + kFBr) of the sequence [s0, s1), as in the bf16 kernel
  if (!cta_rows(tiles, kFBr, T, q0, s0, s1)) return;  // an unused slot
  const int h = cta_head(), kvh = h / group, n_kv = n_heads / group;
  const int q_stride = n_heads * HD, kv_stride = n_kv * HD;
  const int r = threadIdx.x / 4, sub = threadIdx.x % 4;
  const int row = q0 + r;

  for (int i = threadIdx.x; i < kFBr * HD; i += kFThreads) {
    const int rr = i / HD, c = i % HD, t = q0 + rr;
    sQ[rr * kS + c] = t < s1 ? q[static_cast<size_t>(t) * q_stride + h * HD + c] : 0.f;
  }
  float acc[HD / 4];
#pragma unroll
  for (int i = 0; i < HD / 4; ++i) acc[i] = 0.f;
  float m_run = -INFINITY, l_run = 0.f;

  // Keys s0..last_key (causal: up to the tile's last row); row sees keys up to lim.
  const int last_key = CAUSAL ? min(q0 + kFBr, s1) - 1 : s1 - 1;
  const int lim = CAUSAL ? row : s1 - 1;
  for (int k0 = s0; k0 <= last_key; k0 += kFBc) {
    __syncthreads();
    for (int i = threadIdx.x; i < kFBc * HD; i += kFThreads) {
      const int rr = i / HD, c = i % HD, t = k0 + rr;
      sKV[rr * kS + c] = t < s1 ? k[static_cast<size_t>(t) * kv_stride + kvh * HD + c] : 0.f;
    }
    __syncthreads();
    float s[kFBc / 4];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kFBc / 4; ++i) {
      const int c = sub + 4 * i;
      float d = 0.f;
#pragma unroll 8
      for (int e = 0; e < HD; ++e) d = fmaf(sQ[r * kS + e], sKV[c * kS + e], d);
      s[i] = (k0 + c <= lim && k0 + c < s1) ? d * scale : -INFINITY;
      mx = fmaxf(mx, s[i]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_run, mx);
    const float alpha = m_new == -INFINITY ? 1.f : expf(m_run - m_new);
    const float mb = m_new == -INFINITY ? 0.f : m_new;
    m_run = m_new;
    float rs = 0.f;
#pragma unroll
    for (int i = 0; i < kFBc / 4; ++i) {
      const float p = expf(s[i] - mb);
      rs += p;
      sP[r * (kFBc + 1) + sub + 4 * i] = p;
    }
    l_run = l_run * alpha + rs;
#pragma unroll
    for (int i = 0; i < HD / 4; ++i) acc[i] *= alpha;
    __syncthreads();  // scores done with K; sP complete
    for (int i = threadIdx.x; i < kFBc * HD; i += kFThreads) {
      const int rr = i / HD, c = i % HD, t = k0 + rr;
      sKV[rr * kS + c] = t < s1 ? v[static_cast<size_t>(t) * kv_stride + kvh * HD + c] : 0.f;
    }
    __syncthreads();
    for (int c = 0; c < kFBc; ++c) {
      const float p = sP[r * (kFBc + 1) + c];
#pragma unroll
      for (int i = 0; i < HD / 4; ++i) acc[i] = fmaf(p, sKV[c * kS + sub + 4 * i], acc[i]);
    }
  }
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);
  if (row < s1) {
    const float inv = 1.f / l_run;
    float* orow = out + static_cast<size_t>(row) * q_stride + h * HD;
#pragma unroll
    for (int i = 0; i < HD / 4; ++i) orow[sub + 4 * i] = acc[i] * inv;
  }
}

template <int HD, bool CAUSAL>
void launch_f32_kernel(const float* q, const float* k, const float* v, float* out, int T,
                       int n_heads, int n_kv_heads, int grid_x, float scale, const int4* tiles,
                       cudaStream_t stream) {
  const size_t smem =
      (static_cast<size_t>(kFBr + kFBc) * (HD + 1) + kFBr * (kFBc + 1)) * sizeof(float);
  cudaError_t e =
      cudaFuncSetAttribute(flash_attn_f32_kernel<HD, CAUSAL>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess)
    throw std::runtime_error("attention_core_f32: cannot get " + std::to_string(smem) +
                             " bytes of shared memory: " + cudaGetErrorString(e));
  flash_attn_f32_kernel<HD, CAUSAL><<<attention_grid(grid_x, n_heads), kFThreads, smem, stream>>>(
      q, k, v, out, T, n_heads, n_heads / n_kv_heads, scale, tiles);
  CLEF_CUDA_LAUNCH_CHECK();
}

template <int HD>
void launch_f32(const float* q, const float* k, const float* v, float* out, int T, int n_heads,
                int n_kv_heads, const AttnSequences* seqs, cudaStream_t stream) {
  const int4* tiles = tile_table(seqs);
  const int grid_x = tiles ? seqs->tile_slots : (T + kFBr - 1) / kFBr;
  const float scale = score_scale(seqs, HD);
  if (is_causal(seqs))
    launch_f32_kernel<HD, true>(q, k, v, out, T, n_heads, n_kv_heads, grid_x, scale, tiles, stream);
  else
    launch_f32_kernel<HD, false>(q, k, v, out, T, n_heads, n_kv_heads, grid_x, scale, tiles,
                                 stream);
}

// The runtime head_dim (supported_head_dim) as a template argument.
#define CLEF_HEAD_DIM_CASES(CALL) \
  case 32:                        \
    CALL(32);                     \
    break;                        \
  case 64:                        \
    CALL(64);                     \
    break;                        \
  case 72:                        \
    CALL(72);                     \
    break;                        \
  case 80:                        \
    CALL(80);                     \
    break;                        \
  case 96:                        \
    CALL(96);                     \
    break;                        \
  case 128:                       \
    CALL(128);                    \
    break;                        \
  case 160:                       \
    CALL(160);                    \
    break;                        \
  case 192:                       \
    CALL(192);                    \
    break;                        \
  case 224:                       \
    CALL(224);                    \
    break;                        \
  case 256:                       \
    CALL(256);                    \
    break;

}  // namespace

void attention_core_bf16_warps(int warps, const __nv_bfloat16* q, const __nv_bfloat16* k,
                               const __nv_bfloat16* v, __nv_bfloat16* out, int T, int n_heads,
                               int n_kv_heads, int head_dim, cudaStream_t stream,
                               const AttnSequences* seqs) {
  check_shape(T, n_heads, n_kv_heads, head_dim);
  check_sequences(seqs);
  if (warps != 4 && warps != 8)
    throw std::invalid_argument("attention_core_bf16: warps must be 4 or 8");
  if (T == 0) return;
  if (warps == 8) {
#define CLEF_CALL(HD) launch_bf16<HD, 8>(q, k, v, out, T, n_heads, n_kv_heads, seqs, stream)
    switch (head_dim) { CLEF_HEAD_DIM_CASES(CLEF_CALL) }
#undef CLEF_CALL
  } else {
#define CLEF_CALL(HD) launch_bf16<HD, 4>(q, k, v, out, T, n_heads, n_kv_heads, seqs, stream)
    switch (head_dim) { CLEF_HEAD_DIM_CASES(CLEF_CALL) }
#undef CLEF_CALL
  }
}

int attention_rows_per_tile(bool bf16, int T, int n_heads, int head_dim, bool generic) {
  return bf16 ? attention_variant_rows_per_tile(
                    attention_core_bf16_pick(T, n_heads, head_dim, generic))
              : kFBr;
}

int attention_padded_head_dim(int head_dim) {
  if (head_dim < 1 || head_dim > 256)
    throw std::invalid_argument("attention_padded_head_dim: head_dim " + std::to_string(head_dim) +
                                " outside [1, 256]");
  int hd = head_dim;
  while (!supported_head_dim(hd)) ++hd;
  return hd;
}

int attention_core_bf16_pick_warps(int T, int n_heads, int head_dim) {
  // Measured on an H200 (16/4 heads, hd 256; the throughput run is now dev/cuda/attention.cu): the
  // 8-warp shape was not faster beyond noise (T 361: 25.9 vs 31.7 TFLOP/s; 961: 83.5 vs 82.9; 2761:
  // 137 vs 140; 5661: 173 vs 178), and it does not fit sm_86/sm_89 shared memory. So 4 warps
  // everywhere until a faster shape exists.
  (void)T;
  (void)n_heads;
  (void)head_dim;
  return 4;
}

namespace {

// A tuning override of the pick, for timing the variants inside the engine on a device:
// CLEF_ATTN_PICK="80=w4m2s1,256=w8s2" names a variant per (padded) head dim. Read once per process
// (process configuration, like OPENBLAS_NUM_THREADS); a malformed value throws at the first pick.
std::vector<std::pair<int, AttnVariant>> parse_pick_override(const char* env) {
  std::vector<std::pair<int, AttnVariant>> table;
  if (!env) return table;
  const std::string s(env);
  size_t at = 0;
  while (at < s.size()) {
    const size_t end = std::min(s.find(',', at), s.size());
    const std::string item = s.substr(at, end - at);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("CLEF_ATTN_PICK: \"" + item + "\" is not HEAD_DIM=VARIANT");
    table.emplace_back(std::stoi(item.substr(0, eq)),
                       attention_variant_from_name(item.substr(eq + 1)));
    at = end + 1;
  }
  return table;
}

const std::vector<std::pair<int, AttnVariant>>& pick_override() {
  static const std::vector<std::pair<int, AttnVariant>> table =
      parse_pick_override(std::getenv("CLEF_ATTN_PICK"));
  return table;
}

}  // namespace

AttnVariant attention_core_bf16_pick(int T, int n_heads, int head_dim, bool generic,
                                     bool kv_tiled_ok) {
  // A pick must stay a variant attention_variant_supported accepts on every device it can meet (or
  // fall back to a default shape), as attention_rows_per_tile follows it. It runs on every launch
  // and every attention_rows_per_tile: a scan of a constant table and the shared-memory limit
  // cached per device (flash::device_smem_optin), no device query.
  for (const auto& [hd, v] : pick_override())
    if (hd == head_dim && attention_variant_supported(v, head_dim) &&
        !(generic && v.wgmma_key_tile) && (kv_tiled_ok || !v.kv_tiled))
      return v;
  // On sm_90 the Hopper kernel (flash_wgmma.cu), unless `generic` (--kernels generic) asks for the
  // mma.sync kernels. H200 (perf-log v13): at the tower's head dim 72, one 4096-row segment, wg64o4
  // (four warpgroups) 254.8 us against 290.0 for wg64o and 339.8 for w4m2s1 (four 1024-row
  // segments 78.6 / 85.5 / 97.2); at 256 (the backbone, causal 16:4) wg64 beats w4s1 at every
  // length: 961 / 5661 / 16384 tokens 72.9 / 1212 / 8110 us against 77.7 / 1259 / 8841.
  if (!generic && (head_dim == 72 || head_dim == 80 || head_dim == 256)) {
    AttnVariant hopper;
    hopper.warps = 8, hopper.wgmma_key_tile = 64, hopper.wgmma_overlap = head_dim != 256;
    hopper.stages = hopper.wgmma_overlap ? 3 : 2;
    AttnVariant wide = hopper;
    wide.warps = 16;
    // Where the caller writes K and V in key tiles (the tower at 72 / 80, the backbone at 256):
    // wg64o4te, 175.6 us at one 4096-row segment against 211.8 for wg64o4t (the same tiles, a CTA
    // barrier per key tile) and 254.8 for wg64o4 (perf-log v14b). At 256 (causal 16:4, perf-log
    // v17a/b) wg64ote up to 8192 rows: 34.1 / 156.5 / 480.8 us at 961 / 2761 / 5661 against 35.6 /
    // 166.0 / 516.0 for wg64te (wg64: 72.3 / 361.6 / 1203.7); past that wg64te, 3288 us at 16384
    // against 3487.
    AttnVariant tiled = hopper.wgmma_overlap ? wide : hopper;
    tiled.kv_tiled = tiled.release_barriers = true;
    if (head_dim == 256) tiled.wgmma_overlap = T <= 8192;  // (both forms: the same shared memory)
    if (kv_tiled_ok && attention_variant_supported(tiled, head_dim)) return tiled;
    if (hopper.wgmma_overlap && attention_variant_supported(wide, head_dim)) return wide;
    if (attention_variant_supported(hopper, head_dim)) return hopper;
  }
  // The tower's head dim on mma.sync (72, or padded to 80): 4 warps of 32 query rows each (two
  // m-tiles: each K/V fragment read from shared memory feeds twice the MMAs). H200, non-causal 16
  // heads, one 4096-row segment: 350.7 us (245 TFLOP/s) against 460.2 us for w4s1, the fastest of
  // 15 variants; four 1024-row segments 101.6 vs 125.3 us (perf-log v11c; at 72 v12b). At head
  // dim 256 no mma.sync variant beat w4s1 (961 / 5661 tokens: 77.6 / 1270 us; the next best 81.1 /
  // 1366).
  if (head_dim == 72 || head_dim == 80) {
    const AttnVariant tower{4, 1, false, 2, false};
    if (attention_variant_supported(tower, head_dim)) return tower;
  }
  return {attention_core_bf16_pick_warps(T, n_heads, head_dim), 1, false, 1, false};
}

void attention_core_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                         __nv_bfloat16* out, int T, int n_heads, int n_kv_heads, int head_dim,
                         cudaStream_t stream, const AttnSequences* seqs, bool generic) {
  check_shape(T, n_heads, n_kv_heads, head_dim);
  check_sequences(seqs);  // bad arguments refused before the pick asks the device anything
  if (T == 0) return;
  attention_core_bf16_variant(attention_core_bf16_pick(T, n_heads, head_dim, generic), q, k, v, out,
                              T, n_heads, n_kv_heads, head_dim, stream, seqs);
}

void attention_core_f32(const float* q, const float* k, const float* v, float* out, int T,
                        int n_heads, int n_kv_heads, int head_dim, cudaStream_t stream,
                        const AttnSequences* seqs) {
  check_shape(T, n_heads, n_kv_heads, head_dim);
  check_sequences(seqs);
  if (T == 0) return;
#define CLEF_CALL(HD) launch_f32<HD>(q, k, v, out, T, n_heads, n_kv_heads, seqs, stream)
  switch (head_dim) { CLEF_HEAD_DIM_CASES(CLEF_CALL) }
#undef CLEF_CALL
}

}  // namespace clef::engine::cuda

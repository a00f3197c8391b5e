// The bf16 attention kernel variants beyond the default shapes (tuning.h): 2-stage K/V pipelines,
// Q in registers, two m-tiles a warp and the rescale skip, instantiated for the head dims the
// models use (64, 80, 128, 256), so that the workbench and the tests can run each one next to the
// default kernel; at 72 (the vision tower's head dim, unpadded) only the engine's pick, w4m2s1
// (each instantiation adds compile time). Also the per-device shared-memory limit they check.
#include <cuda_bf16.h>

#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/flash_bf16.cuh"
#include "engine/cuda/attention/flash_wgmma.h"
#include "engine/cuda/attention/tuning.h"
#include "engine/cuda/cuda_check.h"

namespace clef::engine::cuda {
namespace {

using namespace flash;

// Every built variant (attention_bf16_variants), the default shapes first.
constexpr std::array<AttnVariant, 20> kVariants = {{{4, 1, false, 1},
                                                    {8, 1, false, 1},
                                                    {4, 1, true, 1},
                                                    {8, 1, true, 1},
                                                    {4, 2, false, 1},
                                                    {8, 2, false, 1},
                                                    {4, 2, true, 1},
                                                    {8, 2, true, 1},
                                                    {4, 1, false, 2},
                                                    {4, 2, false, 2},
                                                    {8, 2, false, 2},
                                                    {4, 1, false, 2, true},
                                                    {8, 2, false, 1, true},
                                                    {8, 2, false, 1, false, 64},
                                                    {8, 3, false, 1, false, 64, true},
                                                    {16, 3, false, 1, false, 64, true},
                                                    {16, 3, false, 1, false, 64, true, true},
                                                    {16, 3, false, 1, false, 64, true, true, true},
                                                    {8, 2, false, 1, false, 64, false, true, true},
                                                    {8, 2, false, 1, false, 64, true, true, true}}};

constexpr AttnVariant kTowerPick{4, 1, false, 2, false};  // w4m2s1, the only variant built at 72

bool variant_head_dim(const AttnVariant& v, int head_dim) {
  if (head_dim == 72) return v == kTowerPick;
  return head_dim == 64 || head_dim == 80 || head_dim == 128 || (head_dim == 256 && v.m_tiles == 1);
}

bool is_default(const AttnVariant& v) {
  return v.stages == 1 && !v.q_in_regs && v.m_tiles == 1 && !v.skip_rescale;
}

template <int WARPS, int STAGES, bool QREG, int MT, bool RSKIP>
void launch_hd(int head_dim, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
               __nv_bfloat16* out, int T, int n_heads, int n_kv_heads, const AttnSequences* seqs,
               cudaStream_t stream) {
  switch (head_dim) {
    case 72:
      if constexpr (WARPS == 4 && STAGES == 1 && !QREG && MT == 2 && !RSKIP)
        return launch_bf16<72, WARPS, STAGES, QREG, MT, RSKIP>(q, k, v, out, T, n_heads, n_kv_heads,
                                                               seqs, stream);
      break;
    case 64:
      return launch_bf16<64, WARPS, STAGES, QREG, MT, RSKIP>(q, k, v, out, T, n_heads, n_kv_heads,
                                                             seqs, stream);
    case 80:
      return launch_bf16<80, WARPS, STAGES, QREG, MT, RSKIP>(q, k, v, out, T, n_heads, n_kv_heads,
                                                             seqs, stream);
    case 128:
      return launch_bf16<128, WARPS, STAGES, QREG, MT, RSKIP>(q, k, v, out, T, n_heads, n_kv_heads,
                                                              seqs, stream);
    case 256:
      if constexpr (MT == 1)
        return launch_bf16<256, WARPS, STAGES, QREG, MT, RSKIP>(q, k, v, out, T, n_heads,
                                                                n_kv_heads, seqs, stream);
      break;
    default:
      break;
  }
  throw std::invalid_argument("attention_core_bf16: no variant kernel for head_dim " +
                              std::to_string(head_dim));
}

}  // namespace

namespace flash {

size_t device_smem_optin() {
  return static_cast<size_t>(device_attribute(DeviceAttr::SmemOptin));
}

}  // namespace flash

std::vector<AttnVariant> attention_bf16_variants() {
  return {kVariants.begin(), kVariants.end()};
}

int attention_variant_rows_per_tile(const AttnVariant& v) {
  if (v.wgmma_key_tile) return wgmma_attention_rows_per_tile(v.warps / 4);
  return 16 * v.warps * v.m_tiles;
}

std::string attention_variant_name(const AttnVariant& v) {
  if (v.wgmma_key_tile)
    return "wg" + std::to_string(v.wgmma_key_tile) + (v.wgmma_overlap ? "o" : "") +
           (v.warps == 16 ? "4" : "") + (v.kv_tiled ? "t" : "") + (v.release_barriers ? "e" : "");
  return "w" + std::to_string(v.warps) + (v.m_tiles > 1 ? "m" + std::to_string(v.m_tiles) : "") +
         "s" + std::to_string(v.stages) + (v.q_in_regs ? "q" : "") + (v.skip_rescale ? "r" : "");
}

AttnVariant attention_variant_from_name(const std::string& name) {
  std::string names;
  for (const AttnVariant& v : attention_bf16_variants()) {
    if (attention_variant_name(v) == name) return v;
    names += (names.empty() ? "" : ", ") + attention_variant_name(v);
  }
  throw std::invalid_argument("attention: no kernel variant named '" + name + "' (" + names + ")");
}

bool attention_variant_supported(const AttnVariant& v, int head_dim) {
  bool built = false;
  for (const AttnVariant& b : kVariants) built |= b == v;
  if (!built) return false;
  if (v.wgmma_key_tile)
    return wgmma_attention_supported(head_dim, v.wgmma_overlap, v.warps / 4, v.kv_tiled);
  if (is_default(v)) return true;  // every head dim; 1 stage fits sm_80+
  if (!variant_head_dim(v, head_dim)) return false;
  return bf16_smem_bytes(head_dim, attention_variant_rows_per_tile(v), v.stages) <=
         device_smem_optin();
}

void attention_core_bf16_variant(const AttnVariant& variant, const __nv_bfloat16* q,
                                 const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* out,
                                 int T, int n_heads, int n_kv_heads, int head_dim,
                                 cudaStream_t stream, const AttnSequences* seqs) {
  if (variant.kv_tiled)
    return attention_core_bf16_wgmma_kv_tiled(variant.wgmma_overlap, variant.warps / 4, q, k, v,
                                              out, T, n_heads, n_kv_heads, head_dim, stream, seqs,
                                              variant.release_barriers);
  if (variant.wgmma_key_tile)
    return attention_core_bf16_wgmma(variant.wgmma_overlap, variant.warps / 4, q, k, v, out, T,
                                     n_heads, n_kv_heads, head_dim, stream, seqs);
  if (is_default(variant))
    return attention_core_bf16_warps(variant.warps, q, k, v, out, T, n_heads, n_kv_heads, head_dim,
                                     stream, seqs);
  check_shape(T, n_heads, n_kv_heads, head_dim);
  check_sequences(seqs);
  if (T == 0) return;
  const int w = variant.warps, st = variant.stages, mt = variant.m_tiles;
  const bool qr = variant.q_in_regs, rs = variant.skip_rescale;
  // The built non-default variants (attention_bf16_variants).
#define CLEF_VARIANT(W, ST, QR, MT, RS)                                                       \
  if (w == W && st == ST && qr == QR && mt == MT && rs == RS)                                 \
    return launch_hd<W, ST, QR, MT, RS>(head_dim, q, k, v, out, T, n_heads, n_kv_heads, seqs, \
                                        stream);
  CLEF_VARIANT(4, 1, true, 1, false)
  CLEF_VARIANT(8, 1, true, 1, false)
  CLEF_VARIANT(4, 2, false, 1, false)
  CLEF_VARIANT(8, 2, false, 1, false)
  CLEF_VARIANT(4, 2, true, 1, false)
  CLEF_VARIANT(8, 2, true, 1, false)
  CLEF_VARIANT(4, 1, false, 2, false)
  CLEF_VARIANT(4, 2, false, 2, false)
  CLEF_VARIANT(8, 2, false, 2, false)
  CLEF_VARIANT(4, 1, false, 2, true)
  CLEF_VARIANT(8, 2, false, 1, true)
#undef CLEF_VARIANT
  throw std::invalid_argument("attention_core_bf16: no kernel variant " +
                              attention_variant_name(variant));
}

}  // namespace clef::engine::cuda

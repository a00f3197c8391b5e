// The backbone's activations: one device allocation carved into named buffers, sized from the
// most rows a forward may have and the model's geometry (llm.c's ActivationTensors). Growing it
// moves every buffer, so captured graphs must be dropped (the engine does).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/data_type.h"
#include "model/config.h"

namespace clef::engine::cuda {

// Rows are tokens; "act" is the activation type (bf16 | fp32); widths are per row.
struct Activations {
  void* residual = nullptr;      // act [T, hidden]: the residual stream
  void* normed = nullptr;        // act [T, hidden]: RMSNorm output, the next GEMM's input
  void* proj = nullptr;          // act [T, widest fused projection]: in_proj / gate_up output
  void* mixer_out = nullptr;     // act [T, max(GDN value width, attention width, intermediate)]
  void* final_hidden = nullptr;  // act [T, hidden]: after the final norm, the head's input
  float* gdn_q = nullptr;        // fp32 [T, key heads, dk] (l2-normalised, scaled)
  float* gdn_k = nullptr;        // fp32 [T, key heads, dk]
  float* gdn_v = nullptr;        // fp32 [T, value heads, dv]
  float* gdn_g = nullptr;        // fp32 [T, value heads]: log decay
  float* gdn_beta = nullptr;     // fp32 [T, value heads]
  void* gdn_out = nullptr;       // act [T, value heads, dv]
  void* gdn_scratch = nullptr;   // the chunked kernels' workspace (gdn_workspace_bytes)
  void* attn_q = nullptr;        // act [T, heads, head_dim] (normed, roped)
  void* attn_k = nullptr;        // act [T, kv heads, head_dim]
  void* attn_v = nullptr;        // act [T, kv heads, head_dim]
  int32_t* ids = nullptr;        // [T] token ids (right-padded)
  // The bf16 form of the GDN inputs (gdn/gdn.h GdnInputs, where gdn_takes_bf16_inputs) instead of
  // gdn_q, gdn_k, gdn_v: a layer writes one form only, so each bf16 view ALIASES the first half of
  // its fp32 buffer (no extra bytes); only the factors have their own.
  __nv_bfloat16* gdn_xq = nullptr;  // bf16 [T, key heads, dk] in gdn_q's bytes
  __nv_bfloat16* gdn_xk = nullptr;  // bf16 [T, key heads, dk] in gdn_k's bytes
  __nv_bfloat16* gdn_xv = nullptr;  // bf16 [T, value heads, dv] in gdn_v's bytes
  float* gdn_rq = nullptr;          // fp32 [T, key heads]
  float* gdn_rk = nullptr;          // fp32 [T, key heads]
  // A packed forward's tables (packing.h), sized for kMaxPackedSequences sequences in T rows.
  int32_t* positions = nullptr;    // [T]
  int32_t* kv_rows = nullptr;      // [T] (PackTables::kv_rows)
  int32_t* chunk_row0 = nullptr;   // [gdn_chunk_slots(T, kMaxPackedSequences)]
  int32_t* chunk_valid = nullptr;  // same
  int32_t* seq_chunk0 = nullptr;   // [kMaxPackedSequences + 1]
  int32_t* gdn_core = nullptr;     // [1] GdnSequences::fused
  int32_t* tiles = nullptr;        // [attention_tile_slots(T, kMaxPackedSequences, 16)][4]
  float* hidden_f32 = nullptr;     // fp32 [T, hidden]: final_hidden as float, for dumps
  // FP8 weights only (else null): the next FP8 GEMM's activations as its producer quantised them
  // (kernels/quantize.h Fp8Rows): e4m3 [T, K] and scale(t, kb) = act_scale[kb * T + t], K up to
  // max(hidden, mixer width).
  uint8_t* act_q = nullptr;
  float* act_scale = nullptr;
};

class Workspace {
 public:
  // fp8: room for the FP8 activations too (act_q, act_scale).
  Workspace(const model::TextConfig& config, DataType act, int max_in_proj, bool fp8 = false);
  // Makes room for `tokens` rows; true when it reallocated (every pointer moved).
  bool reserve(int tokens);
  int tokens() const { return tokens_; }
  const Activations& buffers() const { return a_; }
  void* base() const { return mem_.get(); }
  size_t bytes() const { return mem_.bytes(); }
  size_t growths() const { return growths_; }

 private:
  const model::TextConfig& cfg_;
  DataType act_;
  int max_in_proj_;
  bool fp8_;
  int tokens_ = 0;
  size_t growths_ = 0;
  DeviceBuffer mem_;
  Activations a_;
};

}  // namespace clef::engine::cuda

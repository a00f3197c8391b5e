// Simple CPU references for the backbone kernels (engine/cuda/kernels/*.h, engine/cuda/gdn/gdn.h),
// used by the GPU tests and the dev/cuda workbench only (clef_engine_ref, never production). Same
// math and the same rounding points: `bf16` = true rounds where the bf16 kernels round.
#pragma once

#include <cstdint>

namespace clef::engine::ref {

float round_bf16(float x);  // round to nearest even bf16, returned as float

void rms_norm_1p_ref(const float* x, const float* w, float* out, int rows, int D, float eps,
                     bool bf16);

// proj [T, ld]; conv_w [C, K]; outputs as gdn_conv_prep. positions (host, [T], optional): each
// row's position in its sequence; a tap never reaches further back than that (null: row index).
void gdn_conv_prep_ref(const float* proj, int T, int ld, int Hk, int Hv, int dk, int dv, int K,
                       int b_off, int a_off, const float* conv_w, const float* A_log,
                       const float* dt_bias, bool bf16, float* q, float* k, float* v, float* g,
                       float* beta, const int32_t* positions = nullptr);

// The causal conv + SiLU of gdn_conv_prep_ref over the first C columns of proj (the qkv channels,
// C = 2 Hk dk + Hv dv), before the q/k normalisation and before the last rounding: s [T, C] =
// silu(rnd(acc)) in fp32, acc the fp32 sum of the K taps in tap order (like the kernels: products
// of bf16 values are exact, so in bf16 mode rnd(acc) is theirs bit for bit). gdn_conv_prep_ref's y
// is rnd(s); the bf16 form of gdn_conv_prep_bf16x stores round_bf16(s).
void gdn_conv_silu_ref(const float* proj, int T, int ld, int C, int K, const float* conv_w,
                       bool bf16, float* s, const int32_t* positions = nullptr);

// scale / sqrt(sum x[i]^2 + 1e-6f) over x[0, d), in double: the l2 factor of a GDN q (scale
// 1 / sqrt(dk)) or k (scale 1) head as gdn_conv_prep_bf16x's rq, rk approximate it.
double gdn_l2_factor(const float* x, int d, double scale);

// The exact sequential recurrence (docs/spec/model.md §3), double accumulation, fp32 state
// semantics.
void gated_delta_rule_ref(const float* q, const float* k, const float* v, const float* g,
                          const float* beta, int T, int Hk, int Hv, int dk, int dv, float* o);

void gated_rms_norm_ref(const float* o, const float* z, int ldz, const float* w, float* y, int T,
                        int H, int dv, float eps, bool bf16);

// inv_freq: the production rope_inv_freq (engine/cuda/kernels/attn_prep.h). positions (host,
// [T], optional): the RoPE position of each row (null: row index).
void attn_prep_ref(const float* proj, int T, int ld, int nh, int nkv, int hd, int rd, float eps,
                   const float* inv_freq, const float* qw, const float* kw, bool bf16, float* q,
                   float* k, float* v, const int32_t* positions = nullptr);

void attn_output_gate_ref(float* attn, const float* proj, int ld, int T, int nh, int hd, bool bf16);

void swiglu_ref(const float* gu, float* out, int T, int I, bool bf16);

}  // namespace clef::engine::ref

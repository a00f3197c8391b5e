#include "engine/cuda/backbone.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/kv_tiles.h"
#include "engine/cuda/batch_invariance.h"
#include "engine/cuda/event_timing.h"
#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/gemm/swiglu_gemm.h"
#include "engine/cuda/kernels/attn_prep.h"
#include "engine/cuda/kernels/elementwise.h"
#include "engine/cuda/kernels/gdn_prep.h"
#include "engine/cuda/kernels/norm.h"
#include "engine/cuda/kernels/quantize.h"
#include "engine/cuda/kernels/vision.h"
#include "engine/cuda/profile.h"
#include "engine/prepare/token_buckets.h"

namespace clef::engine::cuda {

using bf16 = __nv_bfloat16;

CudaBackbone::CudaBackbone(const model::TextConfig& config, const BackboneWeights& weights,
                           Gemm& gemm, KernelPath path)
    : cfg_(config), w_(weights), gemm_(gemm), path_(path) {
  rotary_dim_ = static_cast<int>(cfg_.head_dim * cfg_.partial_rotary_factor);
}

std::array<GemmProblem, 5> CudaBackbone::layer_gemms(const LayerWeights& L, const Activations& a,
                                                     int Tp) const {
  const DataType act = w_.activations;
  auto gemm = [&](void* x, const WeightRef& w, void* y, int ldc, bool residual) {
    GemmProblem p;
    p.M = Tp;
    p.N = w.n;
    p.K = w.k;
    if (w.dtype == DataType::F8_E4M3)  // the producer's FP8 output (Fp8Rows: ld K, M = Tp)
      p.a = {a.act_q, DataType::F8_E4M3, w.k, 0, a.act_scale, ScaleMode::Vec128};
    else
      p.a = {x, act, w.k};
    p.b = w.operand();
    p.b_is_nk = true;
    p.c = y;
    p.c_dtype = act;
    p.ldc = ldc;
    p.accumulate = residual;
    p.tuning = GemmTuning::Timed;
    return p;
  };
  const int D = cfg_.hidden_size;
  GemmProblem ba;  // empty unless the layer has one (N = 0: run() and tune() skip it)
  if (L.in_proj_ba.n > 0) {
    const size_t es = data_type_bytes(act);
    ba = gemm(a.normed, L.in_proj_ba, static_cast<char*>(a.proj) + L.b_col * es, L.proj_ld, false);
  }
  std::array<GemmProblem, 5> g = {gemm(a.normed, L.in_proj, a.proj, L.proj_ld, false), ba,
                                  gemm(a.mixer_out, L.out_proj, a.residual, D, true),
                                  gemm(a.normed, L.gate_up, a.proj, L.gate_up.n, false),
                                  gemm(a.mixer_out, L.down, a.residual, D, true)};
  // FP8 shapes tune() found slower than bf16 at this bucket run their bf16 copies.
  const auto fb = bf16_at_.find(bucket_tokens(Tp));  // tune() times at buckets
  if (fb != bf16_at_.end()) {
    const std::array<const WeightRef*, 5> ws = {&L.in_proj, nullptr, &L.out_proj, &L.gate_up,
                                                &L.down};
    const std::array<void*, 5> xs = bf16_inputs(a);
    for (size_t i = 0; i < g.size(); ++i) {
      if (!ws[i] || ws[i]->dtype != DataType::F8_E4M3 || !fb->second.contains(shape_key(g[i])))
        continue;
      const WeightRef& copy = bf16_copy_.at(ws[i]->ptr);
      g[i].a = {xs[i], act, copy.k};
      g[i].b = copy.operand();
    }
  }
  return g;
}

CudaBackbone::ShapeKey CudaBackbone::shape_key(const GemmProblem& p) {
  return {p.N, p.K, p.ldc, p.accumulate ? 1 : 0};
}

std::array<void*, 5> CudaBackbone::bf16_inputs(const Activations& a) {
  return {a.normed, a.normed, a.mixer_out, a.normed, a.mixer_out};
}

double CudaBackbone::time_ms(const GemmProblem& p, cudaStream_t s) const {
  gemm_.tune(p, s);
  for (int i = 0; i < 2; ++i) gemm_.run(p, s);  // warm
  constexpr int kRuns = 8;
  auto runs = [&] {
    for (int i = 0; i < kRuns; ++i) gemm_.run(p, s);
  };
  return elapsed_ms(s, runs) / kRuns;
}

std::vector<std::string> CudaBackbone::bf16_fallbacks(int Tp) const {
  std::vector<std::string> out;
  const auto it = bf16_at_.find(Tp);
  if (it != bf16_at_.end())
    for (const ShapeKey& k : it->second)
      out.push_back(std::to_string(k[0]) + "x" + std::to_string(k[1]));
  return out;
}

namespace {

// Whether a GEMM reads FP8 (so its producer writes FP8).
bool is_fp8(const GemmProblem& p) {
  return p.b.dtype == DataType::F8_E4M3;
}

}  // namespace

bool CudaBackbone::swiglu_gemm_used() const {
  // --kernels generic keeps the plain cuBLASLt + swiglu_generic (a baseline to bisect with).
  return swiglu_gemm_on_ && path_ == KernelPath::Auto && !w_.layers.empty() &&
         w_.layers.front().gate_up_group;
}

bool CudaBackbone::swiglu_gemm_at(int Tp) const {
  return swiglu_gemm_used() && Tp >= swiglu_gemm_min_rows();
}

std::string CudaBackbone::check_swiglu_gemm(const Activations& a, int Tp, cudaStream_t s) {
  const LayerWeights* L = nullptr;
  for (const LayerWeights& l : w_.layers)
    if (l.gate_up_group) {
      L = &l;
      break;
    }
  if (!L) return "";
  const std::string head = "SwiGLU GEMM (gate_up with SwiGLU in its epilogue): from " +
                           std::to_string(swiglu_gemm_min_rows()) + " rows";
  if (Tp <= 0) return head + " (no smaller bucket to compare with)";
  const int D = cfg_.hidden_size, I = cfg_.intermediate_size;
  // Random bf16 rows of a normed hidden state's scale, fixed seed (the bits compared do not
  // depend on the values, only whether the two paths add in one order).
  std::mt19937 rng(14);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<bf16> x(static_cast<size_t>(Tp) * D);
  for (bf16& v : x) v = __float2bfloat16(nd(rng));
  CLEF_CUDA_CHECK(
      cudaMemcpyAsync(a.normed, x.data(), x.size() * sizeof(bf16), cudaMemcpyHostToDevice, s));
  const size_t n = static_cast<size_t>(Tp) * I;
  std::vector<bf16> unfused(n), fused(n);
  gemm_.run(layer_gemms(*L, a, Tp)[3], s);
  swiglu<bf16>(static_cast<const bf16*>(a.proj), static_cast<bf16*>(a.mixer_out), Tp, I, path_, s,
               L->gate_up_group);
  CLEF_CUDA_CHECK(
      cudaMemcpyAsync(unfused.data(), a.mixer_out, n * sizeof(bf16), cudaMemcpyDeviceToHost, s));
  swiglu_gemm(static_cast<const bf16*>(a.normed), static_cast<const bf16*>(L->gate_up.ptr),
              static_cast<bf16*>(a.mixer_out), Tp, D, I, s);
  CLEF_CUDA_CHECK(
      cudaMemcpyAsync(fused.data(), a.mixer_out, n * sizeof(bf16), cudaMemcpyDeviceToHost, s));
  CLEF_CUDA_CHECK(cudaStreamSynchronize(s));
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += std::memcmp(&unfused[i], &fused[i], sizeof(bf16)) != 0;
  std::string line = head + "; at " + std::to_string(Tp) + " rows " +
                     (differ ? std::to_string(differ) + " of " + std::to_string(n) +
                                   " values differ from cuBLASLt + swiglu"
                             : "bit for bit cuBLASLt + swiglu's");
  if (differ && batch_invariant()) {
    swiglu_gemm_on_ = false;
    line += ": off (batch invariance)";
  }
  return line;
}

AttnVariant CudaBackbone::attention_kernel(int Tp, bool packed) const {
  // Key tiles that follow the global row would block a packed sequence's keys otherwise than
  // alone (batch_invariance.h): packs take tiles per sequence, or K and V by rows.
  const bool tiles =
      cfg_.head_dim % 16 == 0 && !(packed && batch_invariant() && !kv_sequence_tiles());
  return attention_core_bf16_pick(Tp, cfg_.num_attention_heads, cfg_.head_dim,
                                  path_ == KernelPath::Generic, tiles);
}

std::map<std::string, std::string> CudaBackbone::kernel_variants() const {
  const auto& c = cfg_;
  const bool is_bf16 = w_.activations == DataType::BF16;
  const int D = c.hidden_size;
  std::map<std::string, std::string> v;
  v["embed_gather"] = embed_gather_variant(D, is_bf16, path_);
  v["rms_norm_1p"] = rms_norm_1p_variant(D, D, D, path_);
  v["swiglu"] = swiglu_variant(c.intermediate_size, path_);
  if (swiglu_gemm_used())
    v["swiglu"] = "swiglu_gemm_tma_wgmma (gate_up's epilogue) from " +
                  std::to_string(swiglu_gemm_min_rows()) + " rows, else " + v["swiglu"] +
                  " on gate_up regrouped by " + std::to_string(w_.layers.front().gate_up_group);
  for (const LayerWeights& L : w_.layers) {
    const int n_in = L.proj_ld;
    if (L.linear && !v.contains("gdn_chunked")) {
      const int Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads,
                dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
      const GdnPrepArgs pa{0, n_in, Hk, Hv, dk, dv, c.linear_conv_kernel_dim, L.b_col, L.a_col};
      v["gdn_conv_prep"] = gdn_takes_bf16_inputs(dk, dv, is_bf16, path_)
                               ? gdn_conv_prep_bf16x_variant(pa, path_)
                               : gdn_conv_prep_variant(pa, path_);
      v["gdn_chunked"] = gdn_chunked_variant(dk, dv, is_bf16, path_);
      // bf16 GEMM weights: the norm is the GDN output kernel's epilogue (FP8 ones: the FP8 producer
      // where out_proj runs in FP8, as named before)
      v["gated_rms_norm"] =
          w_.gemm_weights != DataType::F8_E4M3 && gdn_fuses_gated_norm(dk, dv, is_bf16, path_)
              ? "gated_rms_norm_in_gdn_output"
              : gated_rms_norm_variant(n_in, dv, path_);
    } else if (!L.linear && !v.contains("attn_prep")) {
      AttnPrepArgs pa{0,           n_in, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                      rotary_dim_, 0.f,  w_.rope_inv_freq};
      pa.kv_tiled = is_bf16 && attention_kernel(4096).kv_tiled;
      v["attn_prep"] = attn_prep_variant(pa, path_);
      v["attn_output_gate"] = attn_output_gate_variant(n_in, c.head_dim, path_);
    }
  }
  return v;
}

void CudaBackbone::tune(const Activations& a, int Tp, cudaStream_t s) {
  if (w_.gemm_weights == DataType::F8_E4M3 && !bf16_at_.contains(Tp)) {
    // FP8 or bf16 per shape at this bucket, timed on the real FP8 operands and, for bf16, on a
    // stand-in weight of the shape (GEMM time does not depend on the values).
    std::set<ShapeKey> slower, timed;
    const std::array<void*, 5> xs = bf16_inputs(a);
    for (const LayerWeights& L : w_.layers) {
      const std::array<GemmProblem, 5> g = layer_gemms(L, a, Tp);
      for (size_t i = 0; i < g.size(); ++i) {
        const GemmProblem& p = g[i];
        if (p.N <= 0 || p.b.dtype != DataType::F8_E4M3 || !timed.insert(shape_key(p)).second)
          continue;
        const double t8 = time_ms(p, s);
        const size_t wb = static_cast<size_t>(p.N) * p.K * 2;
        timing_weight_.resize(wb);
        CLEF_CUDA_CHECK(cudaMemsetAsync(timing_weight_.get(), 0, wb, s));  // finite outputs
        GemmProblem pb = p;
        pb.a = {xs[i], DataType::BF16, p.K};
        pb.b = {timing_weight_.get(), DataType::BF16, p.K};
        if (time_ms(pb, s) < t8) slower.insert(shape_key(p));
      }
    }
    // bf16 copies of every FP8 weight of those shapes (once per weight).
    for (const LayerWeights& L : w_.layers) {
      const std::array<GemmProblem, 5> g = layer_gemms(L, a, Tp);
      const std::array<const WeightRef*, 5> ws = {&L.in_proj, nullptr, &L.out_proj, &L.gate_up,
                                                  &L.down};
      for (size_t i = 0; i < g.size(); ++i) {
        const WeightRef* w = ws[i];
        if (!w || w->dtype != DataType::F8_E4M3 || !slower.contains(shape_key(g[i])) ||
            bf16_copy_.contains(w->ptr))
          continue;
        DeviceBuffer b(static_cast<size_t>(w->n) * w->k * 2);
        dequantize_blocks_e4m3(static_cast<const uint8_t*>(w->ptr), w->n, w->k, w->scale,
                               fp8_weight_scale_ld(w->k), 1, b.get<bf16>(), s);
        WeightRef c;
        c.ptr = b.get();
        c.dtype = DataType::BF16;
        c.n = w->n;
        c.k = w->k;
        bf16_copy_[w->ptr] = c;
        bf16_storage_.push_back(std::move(b));
      }
    }
    bf16_at_[Tp] = std::move(slower);
  }
  for (const LayerWeights& L : w_.layers)
    for (const GemmProblem& p : layer_gemms(L, a, Tp)) gemm_.tune(p, s);
}

void CudaBackbone::enqueue_gemms_only(const Activations& a, int Tp, cudaStream_t s) const {
  for (const LayerWeights& L : w_.layers)
    for (const GemmProblem& p : layer_gemms(L, a, Tp)) gemm_.run(p, s);
}

void CudaBackbone::enqueue(const Activations& a, int Tp, cudaStream_t s, StageRecorder* rec,
                           const PackView* pack, const MediaView* media, int layers) const {
  if (media && pack) throw std::logic_error("cuda backbone: media requests run alone");
  if (media && media->positions && cfg_.mrope_section.size() != 3)
    throw std::runtime_error("cuda backbone: multimodal positions need a 3-entry mrope_section");
  if (w_.activations == DataType::F32)
    enqueue_as<float>(a, Tp, s, rec, pack, media, layers);
  else
    enqueue_as<bf16>(a, Tp, s, rec, pack, media, layers);
}

template <typename E>
void CudaBackbone::enqueue_as(const Activations& a, int Tp, cudaStream_t s, StageRecorder* rec,
                              const PackView* pack, const MediaView* media, int layers) const {
  const auto& c = cfg_;
  const int D = c.hidden_size, I = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto mark = [&](const char* l) {
    if (rec) rec->mark(l);
  };
  // Tp is a token bucket, or a pack's exact rows (rounded up to 8) between two buckets: every
  // choice is then the bucket's (the GEMMs' algorithms through Gemm::run_as, so nothing is timed
  // here; the attention kernel, the SwiGLU GEMM) and every kernel runs Tp rows.
  const int algo_m = bucket_tokens(Tp);
  E* h = static_cast<E*>(a.residual);
  E* u = static_cast<E*>(a.normed);
  E* proj = static_cast<E*>(a.proj);
  E* mid = static_cast<E*>(a.mixer_out);
  mark("start");
  embed_gather<E>(static_cast<const E*>(w_.embed), a.ids, h, Tp, D, path_, s);
  if (media && media->n > 0)
    scatter_rows<E>(h, D, static_cast<const E*>(media->rows), media->pad_rows, media->n, D, path_,
                    s);
  // The full-attention layers' kernel (bf16: tuning.h's pick at the bucket, as the pack's tables
  // were cut for it) and, for a pack, its table.
  AttnVariant kernel;
  if constexpr (std::is_same_v<E, bf16>) kernel = attention_kernel(algo_m, pack != nullptr);
  // Per-sequence key tiles (pack_view sets kv_head_blocks where they are on) leave the rows
  // between a pack's sequences unwritten: zeros, once a forward, so the masked keys there read
  // finite values (the kernel weighs them by 0).
  const bool seq_tiles = pack && kernel.kv_tiled && pack->attn.kv_head_blocks > 0;
  if (seq_tiles) {
    const size_t bytes = static_cast<size_t>(c.num_key_value_heads) * pack->attn.kv_head_blocks *
                         kKvTileRows * kv_tile_cols(c.head_dim) * sizeof(E);
    CLEF_CUDA_CHECK(cudaMemsetAsync(a.attn_k, 0, bytes, s));
    CLEF_CUDA_CHECK(cudaMemsetAsync(a.attn_v, 0, bytes, s));
  }
  mark("norms_elementwise");
  // FP8 producers write the next GEMM's activations (K columns) where layer_gemms reads them.
  auto f8 = [&](int K) { return Fp8Rows{a.act_q, K, a.act_scale, Tp}; };
  (void)f8;  // used by the bf16 instantiation only
  const size_t n_layers =
      layers < 0 ? w_.layers.size() : std::min(w_.layers.size(), static_cast<size_t>(layers));
  for (size_t li = 0; li < n_layers; ++li) {
    const LayerWeights& L = w_.layers[li];
    const std::array<GemmProblem, 5> g = layer_gemms(L, a, Tp);
    if constexpr (std::is_same_v<E, bf16>) {
      if (is_fp8(g[0])) {
        // The bf16 copy only where a bf16 GEMM reads it too (GDN [b | a]).
        rms_norm_1p_fp8(h, D, L.input_norm, g[1].N > 0 ? u : nullptr, D, Tp, D, eps, f8(D), path_,
                        s);
      } else {
        rms_norm_1p<E>(h, D, L.input_norm, u, D, Tp, D, eps, path_, s);
      }
    } else {
      rms_norm_1p<E>(h, D, L.input_norm, u, D, Tp, D, eps, path_, s);
    }
    mark("norms_elementwise");
    gemm_.run_as(g[0], algo_m, s);
    gemm_.run_as(g[1], algo_m, s);
    mark("gemm");
    const int n_in = L.proj_ld;
    if (L.linear) {
      const int Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads,
                dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
      const int cqkv = 2 * Hk * dk + Hv * dv;
      GdnPrepArgs pa{Tp,
                     n_in,
                     Hk,
                     Hv,
                     dk,
                     dv,
                     c.linear_conv_kernel_dim,
                     L.b_col,
                     L.a_col,
                     pack ? pack->positions : nullptr};
      // The GDN inputs in the form the chunked kernels take (gdn.h GdnInputs): the tensor-core
      // path reads the conv + SiLU values as bf16 with per-head l2 factors, the SIMT path fp32.
      GdnInputs in;
      in.g = a.gdn_g;
      in.beta = a.gdn_beta;
      if constexpr (std::is_same_v<E, bf16>) {
        if (gdn_takes_bf16_inputs(dk, dv, true, path_)) {
          gdn_conv_prep_bf16x(
              proj, static_cast<const E*>(L.gdn.conv_w), L.gdn.A_log, L.gdn.dt_bias, pa,
              {a.gdn_xq, a.gdn_xk, a.gdn_xv, a.gdn_rq, a.gdn_rk, a.gdn_g, a.gdn_beta}, path_, s);
          in.xq = a.gdn_xq, in.xk = a.gdn_xk, in.xv = a.gdn_xv;
          in.rq = a.gdn_rq, in.rk = a.gdn_rk;
        }
      }
      if (!in.xq) {
        gdn_conv_prep<E>(proj, static_cast<const E*>(L.gdn.conv_w), L.gdn.A_log, L.gdn.dt_bias, pa,
                         a.gdn_q, a.gdn_k, a.gdn_v, a.gdn_g, a.gdn_beta, path_, s);
        in.q = a.gdn_q, in.k = a.gdn_k, in.v = a.gdn_v;
      }
      mark("norms_elementwise");
      // The plain bf16 gated norm rides on the tensor-core output kernel (gdn.h GdnGatedNorm): y
      // goes straight to mid, without o's round trip through memory or a launch; the FP8 producer
      // and the SIMT path keep the separate kernel.
      GdnGatedNorm nrm;
      const GdnGatedNorm* fused = nullptr;
      if constexpr (std::is_same_v<E, bf16>) {
        if (!is_fp8(g[2]) && gdn_fuses_gated_norm(dk, dv, true, path_)) {
          nrm = {proj + cqkv, n_in, L.gdn.norm_w, eps};
          fused = &nrm;
        }
      }
      gdn_chunked<E>(in, Tp, Hk, Hv, dk, dv, fused ? mid : static_cast<E*>(a.gdn_out),
                     a.gdn_scratch, path_, s, nullptr, nullptr, pack ? &pack->gdn : nullptr, fused);
      mark("gdn_core");
      if (fused) {
        // y is in mid already
      } else if constexpr (std::is_same_v<E, bf16>) {
        if (is_fp8(g[2]))
          gated_rms_norm_fp8(static_cast<const E*>(a.gdn_out), proj + cqkv, n_in, L.gdn.norm_w,
                             nullptr, Tp, Hv, dv, eps, f8(Hv * dv), path_, s);
        else
          gated_rms_norm<E>(static_cast<const E*>(a.gdn_out), proj + cqkv, n_in, L.gdn.norm_w, mid,
                            Tp, Hv, dv, eps, path_, s);
      } else {
        gated_rms_norm<E>(static_cast<const E*>(a.gdn_out), proj + cqkv, n_in, L.gdn.norm_w, mid,
                          Tp, Hv, dv, eps, path_, s);
      }
      mark("norms_elementwise");
    } else {
      const int nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
      AttnPrepArgs pa{Tp,
                      n_in,
                      nh,
                      nkv,
                      hd,
                      rotary_dim_,
                      eps,
                      w_.rope_inv_freq,
                      pack ? pack->positions : nullptr};
      if (media && media->positions) {
        pa.mrope_positions = media->positions;
        for (int i = 0; i < 3; ++i) pa.mrope_section[i] = c.mrope_section[i];
      }
      E* q = static_cast<E*>(a.attn_q);
      E* k = static_cast<E*>(a.attn_k);
      E* v = static_cast<E*>(a.attn_v);
      // bf16: K and V in key tiles where the kernel reads them so (the workspace holds
      // kv_tiled_elems for them).
      pa.kv_tiled = kernel.kv_tiled;
      if (seq_tiles) {
        pa.kv_rows = pack->kv_rows;
        pa.kv_head_blocks = pack->attn.kv_head_blocks;
      }
      attn_prep<E>(proj, L.attention.q_norm, L.attention.k_norm, pa, q, k, v, path_, s);
      mark("norms_elementwise");
      const AttnSequences* as = pack ? &pack->attn : nullptr;
      if constexpr (std::is_same_v<E, float>)
        attention_core_f32(q, k, v, mid, Tp, nh, nkv, hd, s, as);
      else
        attention_core_bf16_variant(kernel, q, k, v, mid, Tp, nh, nkv, hd, s, as);
      mark("attention");
      bool gated = false;
      if constexpr (std::is_same_v<E, bf16>) {
        if (is_fp8(g[2])) {
          attn_output_gate_fp8(mid, proj, n_in, Tp, nh, hd, false, f8(nh * hd), s);
          gated = true;
        }
      }
      if (!gated) attn_output_gate<E>(mid, proj, n_in, Tp, nh, hd, path_, s);
      mark("norms_elementwise");
    }
    gemm_.run_as(g[2], algo_m, s);
    mark("gemm");
    bool done = false;
    if constexpr (std::is_same_v<E, bf16>) {
      if (is_fp8(g[3])) {
        rms_norm_1p_fp8(h, D, L.post_norm, nullptr, D, Tp, D, eps, f8(D), path_, s);
        done = true;
      }
    }
    if (!done) rms_norm_1p<E>(h, D, L.post_norm, u, D, Tp, D, eps, path_, s);
    mark("norms_elementwise");
    // gate_up as run: regrouped for the SwiGLU-epilogue GEMM unless FP8 (or its bf16 copy) runs.
    const int group = g[3].b.ptr == L.gate_up.ptr ? L.gate_up_group : 0;
    done = false;
    if constexpr (std::is_same_v<E, bf16>) {
      if (group && !is_fp8(g[4]) && swiglu_gemm_at(algo_m)) {
        swiglu_gemm(u, static_cast<const bf16*>(L.gate_up.ptr), mid, Tp, D, I, s);
        mark("gemm");
        done = true;
      }
    }
    if (!done) {
      gemm_.run_as(g[3], algo_m, s);
      mark("gemm");
      if constexpr (std::is_same_v<E, bf16>) {
        if (is_fp8(g[4])) {
          if (group) throw std::logic_error("backbone: FP8 SwiGLU over a regrouped gate_up");
          swiglu_fp8(proj, nullptr, Tp, I, f8(I), s);
          done = true;
        }
      }
      if (!done) swiglu<E>(proj, mid, Tp, I, path_, s, group);
      mark("norms_elementwise");
    }
    gemm_.run_as(g[4], algo_m, s);
    mark("gemm");
  }
  rms_norm_1p<E>(h, D, w_.final_norm, static_cast<E*>(a.final_hidden), D, Tp, D, eps, path_, s);
  mark("norms_elementwise");
}

}  // namespace clef::engine::cuda

#include "engine/cuda/vision/vision_tower.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/attention/kv_tiles.h"
#include "engine/cuda/attention/tuning.h"
#include "engine/cuda/kernels/patchify.h"
#include "engine/cuda/kernels/vision.h"
#include "engine/cuda/packing.h"
#include "engine/cuda/profile.h"
#include "engine/cuda/staging.h"
#include "media/check_visual_input.h"

namespace clef::engine::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr float kEps = 1e-6f;

std::runtime_error tower_error(const std::string& m) {
  return std::runtime_error("vision tower: " + m);
}

std::vector<media::Grid> all_grids(const media::VisualInput& v) {
  std::vector<media::Grid> g = v.image_grids;
  g.insert(g.end(), v.video_grids.begin(), v.video_grids.end());
  return g;
}

size_t align256(size_t b) {
  return (b + 255) / 256 * 256;
}

}  // namespace

CudaVisionTower::CudaVisionTower(const model::Release& release, DataType act, Gemm& gemm,
                                 KernelPath path,
                                 const std::function<void(const std::string&)>& progress)
    : rel_(release),
      act_(act),
      gemm_(gemm),
      path_(path),
      fused_gelu_(path == KernelPath::Auto && act == DataType::BF16) {
  if (!release.vision) throw tower_error("this model has none (no model.visual.* weights)");
  const model::VisionConfig& v = *release.vision;
  W_ = v.hidden_size;
  I_ = v.intermediate_size;
  heads_ = v.num_heads;
  hd_ = v.head_dim();
  out_w_ = v.out_hidden_size;
  M_ = v.merged_width();
  side_ = static_cast<int>(std::lround(std::sqrt(v.num_position_embeddings)));
  if (heads_ <= 0 || hd_ * heads_ != W_ || hd_ % 4 != 0)
    throw tower_error("width " + std::to_string(W_) + " is not heads x a head dim divisible by 4");
  if (side_ * side_ != v.num_position_embeddings)
    throw tower_error("the position table is not square");
  if (v.patch_values() != media::kPatchValues || v.spatial_merge_size != 2)
    throw tower_error("patches of " + std::to_string(v.patch_values()) +
                      " values merged 2x2 are what the processor makes");
  if (out_w_ != release.text.hidden_size)
    throw tower_error("out_hidden_size " + std::to_string(out_w_) + " is not the backbone's width");
  hdp_ = attention_padded_head_dim(hd_);

  auto put = [&](const void* src, size_t bytes) -> const void* {
    DeviceBuffer b = device_copy(src, bytes);
    weight_bytes_ += b.bytes();
    storage_.push_back(std::move(b));
    return storage_.back().get();
  };
  auto t = [&](const std::string& n) -> const model::Tensor& { return release.visual(n); };
  auto values = [&](const std::string& n, size_t expect) {
    const model::Tensor& x = t(n);
    if (x.numel() != expect)
      throw tower_error(n + " has " + std::to_string(x.numel()) + " values, expected " +
                        std::to_string(expect));
    return x.to_float();
  };
  auto f32 = [&](const std::string& n, size_t expect) {
    const std::vector<float> v32 = values(n, expect);
    return static_cast<const float*>(put(v32.data(), v32.size() * 4));
  };
  auto act_values = [&](const std::vector<float>& v32) {
    Staging b(act_);  // by the loading rule, as the backbone's weights
    b.append(v32.data(), v32.size());
    return put(b.data(), b.bytes());
  };
  auto linear = [&](const std::string& n, int rows, int cols) {
    Linear l;
    l.n = rows;
    l.k = cols;
    l.w = act_values(values(n + ".weight", static_cast<size_t>(rows) * cols));
    l.b = act_values(values(n + ".bias", static_cast<size_t>(rows)));
    return l;
  };

  patch_ = linear("patch_embed.proj", W_, media::kPatchValues);
  pos_table_ = act_values(values("pos_embed.weight", static_cast<size_t>(side_) * side_ * W_));
  {
    const std::vector<float> f = vision_rope_inv_freq(hd_, v.rope_theta);
    inv_freq_ = static_cast<const float*>(put(f.data(), f.size() * 4));
  }
  blocks_.resize(v.depth);
  for (int i = 0; i < v.depth; ++i) {
    Block& b = blocks_[i];
    const std::string p = "blocks." + std::to_string(i) + ".";
    b.norm1_w = f32(p + "norm1.weight", W_);
    b.norm1_b = f32(p + "norm1.bias", W_);
    b.norm2_w = f32(p + "norm2.weight", W_);
    b.norm2_b = f32(p + "norm2.bias", W_);
    b.qkv = linear(p + "attn.qkv", 3 * W_, W_);
    b.fc1 = linear(p + "mlp.linear_fc1", I_, W_);
    b.fc2 = linear(p + "mlp.linear_fc2", W_, I_);
    // The output projection reads the attention core's heads of hdp columns: hd itself where the
    // kernels take it (the Qwen3.5 tower's 72: the weight as it is, K = heads x 72), else zero
    // columns hd..hdp-1 of every head, so the product is the unpadded one exactly.
    const std::vector<float> w = values(p + "attn.proj.weight", static_cast<size_t>(W_) * W_);
    const int kp = heads_ * hdp_;
    std::vector<float> padded(static_cast<size_t>(W_) * kp, 0.0f);
    for (int n = 0; n < W_; ++n)
      for (int j = 0; j < heads_; ++j)
        std::copy_n(w.begin() + static_cast<size_t>(n) * W_ + static_cast<size_t>(j) * hd_, hd_,
                    padded.begin() + static_cast<size_t>(n) * kp + static_cast<size_t>(j) * hdp_);
    b.proj.n = W_;
    b.proj.k = kp;
    b.proj.w = act_values(padded);
    b.proj.b = act_values(values(p + "attn.proj.bias", W_));
    if (progress && ((i + 1) % 9 == 0 || i + 1 == v.depth))
      progress("vision tower: uploaded block " + std::to_string(i + 1) + "/" +
               std::to_string(v.depth));
  }
  merger_norm_w_ = f32("merger.norm.weight", W_);
  merger_norm_b_ = f32("merger.norm.bias", W_);
  merger_fc1_ = linear("merger.linear_fc1", M_, M_);
  merger_fc2_ = linear("merger.linear_fc2", out_w_, M_);
}

namespace {
// The tower's bf16 attention kernel: the pick (mma.sync only under --kernels generic), with K and
// V in key tiles where the RoPE split can write them so (wg64o4te on sm_90).
AttnVariant tower_attention(int R, int heads, int hd, int hdp, KernelPath path) {
  const VisionRopeArgs ra{R, heads, hd, hdp, nullptr, nullptr};
  return attention_core_bf16_pick(R, heads, hdp, path == KernelPath::Generic,
                                  vision_rope_split_tiles_kv(ra, path));
}
}  // namespace

std::string CudaVisionTower::attention_kernel(int R) const {
  return attention_variant_name(tower_attention(R, heads_, hd_, hdp_, path_));
}

std::map<std::string, std::string> CudaVisionTower::kernel_variants() const {
  const bool kv_tiles =
      act_ == DataType::BF16 && tower_attention(1, heads_, hd_, hdp_, path_).kv_tiled;
  const VisionRopeArgs ra{1, heads_, hd_, hdp_, nullptr, nullptr, kv_tiles};
  return {{"vision_layer_norm", layer_norm_variant(W_, path_)},
          {"vision_mlp_gelu", fused_gelu_ ? "fc1_gemm_gelu_bias_epilogue" : gelu_variant(path_)},
          {"vision_merger_gelu", gelu_variant(path_)},
          {"vision_pos_embed_add", vision_pos_embed_add_variant(W_, path_)},
          {"vision_rope_split", vision_rope_split_variant(ra, path_)},
          {"vision_patchify_rows", patchify_rows_variant(path_)}};
}

void CudaVisionTower::check(const media::VisualInput& visual) {
  // The constructor refuses a tower whose patches are not the processor's.
  const int64_t rows = media::check_visual_input(visual, media::kPatchValues);
  if (rows > (int64_t{1} << 30) / media::kPatchValues)
    throw tower_error("more patches than one forward takes");
  if (rows == 0) throw tower_error("no images or videos");
}

CudaVisionTower::Buffers CudaVisionTower::reserve(int64_t rows, size_t frame_bytes, int tile_slots,
                                                  bool kv_tiles) {
  const size_t es = data_type_bytes(act_), R = static_cast<size_t>(rows);
  const size_t padded = R * heads_ * hdp_ * es;
  const size_t kv = kv_tiles ? kv_tiled_elems(static_cast<int>(rows), heads_, hdp_) * es : padded;
  const size_t sizes[] = {R * media::kPatchValues * es,  // pixels
                          frame_bytes,                   // frames
                          R * W_ * es,                   // x
                          R * W_ * es,                   // u
                          R * 3 * W_ * es,               // qkv
                          padded,                        // q
                          kv,                            // k
                          kv,                            // v
                          padded,                        // attn
                          R * std::max(I_, W_) * es,     // mid (MLP; merger fc1 [R/4, 4W])
                          R / 4 * M_ * es,               // merged (merger fc1 output)
                          R / 4 * out_w_ * es,           // out
                          R * 2 * sizeof(int32_t),       // rc
                          static_cast<size_t>(tile_slots) * 4 * sizeof(int32_t)};  // tiles
  size_t total = 0;
  for (size_t b : sizes) total += align256(b);
  work_.resize(total);
  char* p = work_.get<char>();
  void* at[14];
  for (int i = 0; i < 14; ++i) {
    at[i] = p;
    p += align256(sizes[i]);
  }
  return {at[0],
          at[1],
          at[2],
          at[3],
          at[4],
          at[5],
          at[6],
          at[7],
          at[8],
          at[9],
          at[10],
          at[11],
          static_cast<int32_t*>(at[12]),
          static_cast<int32_t*>(at[13])};
}

void CudaVisionTower::gemm(const Linear& l, const void* x, int rows, void* y, bool accumulate,
                           cudaStream_t s, bool gelu) {
  GemmProblem p;
  p.M = rows;
  p.N = l.n;
  p.K = l.k;
  p.a = {x, act_, l.k};
  p.b = {l.w, act_, l.k};
  p.b_is_nk = true;
  p.c = y;
  p.c_dtype = act_;
  p.ldc = l.n;
  p.accumulate = accumulate;
  p.bias = l.b;
  p.gelu = gelu;
  // Row counts vary with every image: the heuristic's answer, cached per shape.
  p.tuning = GemmTuning::Heuristic;
  gemm_.run(p, s);
}

const void* CudaVisionTower::enqueue(const media::VisualInput& visual, cudaStream_t s,
                                     StageRecorder* rec) {
  if (act_ == DataType::F32)
    enqueue_as<float>(visual, s, rec, false);
  else
    enqueue_as<bf16>(visual, s, rec, false);
  return out_ptr_;
}

void CudaVisionTower::enqueue_gemms_only(const media::VisualInput& visual, cudaStream_t s) {
  if (act_ == DataType::F32)
    enqueue_as<float>(visual, s, nullptr, true);
  else
    enqueue_as<bf16>(visual, s, nullptr, true);
}

template <typename E>
void CudaVisionTower::enqueue_as(const media::VisualInput& visual, cudaStream_t s,
                                 StageRecorder* rec, bool gemms_only) {
  auto mark = [&](const char* l) {
    if (rec) rec->mark(l);
  };
  check(visual);
  const std::vector<media::Grid> grids = all_grids(visual);
  int64_t rows = 0;
  std::vector<int> segments;
  for (const media::Grid& g : grids) {
    for (int k = 0; k < g.t; ++k) segments.push_back(g.h * g.w);
    rows += g.patches();
  }
  const int R = static_cast<int>(rows);
  const bool is_bf16 = act_ == DataType::BF16;
  const AttnVariant attn = tower_attention(R, heads_, hd_, hdp_, path_);
  const bool kv_tiles = is_bf16 && attn.kv_tiled;  // (the float32 tower runs attention_core_f32)
  const int rpt = is_bf16 ? attention_variant_rows_per_tile(attn)
                          : attention_rows_per_tile(false, R, heads_, hdp_);
  const std::vector<int32_t> tiles = segment_tiles(segments, rpt);
  const int tile_slots = static_cast<int>(tiles.size() / 4);
  // One workspace and one staging area: whatever ran before (an earlier request's backbone still
  // reading these rows, its uploads) is done before they are reused or moved.
  CLEF_CUDA_CHECK(cudaStreamSynchronize(s));
  const Buffers b = reserve(rows, visual.frames.size(), tile_slots, kv_tiles);
  tokens_ = rows / 4;
  out_ptr_ = b.out;

  if (!gemms_only) {  // (the GEMM floor times the GEMMs alone, on whatever the buffers hold)
    // Host side: each row's (r, c), the attention tiles and the uint8 frames through pinned
    // staging; the patch rows are made on the device in the activation type (patchify_rows: the
    // host's normalisation and the reference's cast to the tower's dtype, bit for bit).
    const size_t rc_bytes = static_cast<size_t>(R) * 2 * sizeof(int32_t),
                 tile_bytes = tiles.size() * sizeof(int32_t), frame_bytes = visual.frames.size();
    const size_t tiles_at = align256(rc_bytes), frames_at = tiles_at + align256(tile_bytes);
    staging_.resize(frames_at + frame_bytes);
    char* hp = staging_.get<char>();
    int32_t* rc = reinterpret_cast<int32_t*>(hp);
    {
      int64_t row = 0;
      for (const media::Grid& g : grids)
        for (int k = 0; k < g.t; ++k)
          for (int64_t i = 0; i < static_cast<int64_t>(g.h) * g.w; ++i, ++row)
            media::patch_coords(i, g.w, rc[2 * row], rc[2 * row + 1]);
    }
    int32_t* ht = reinterpret_cast<int32_t*>(hp + tiles_at);
    std::copy(tiles.begin(), tiles.end(), ht);
    std::memcpy(hp + frames_at, visual.frames.data(), frame_bytes);
    CLEF_CUDA_CHECK(
        cudaMemcpyAsync(b.frames, hp + frames_at, frame_bytes, cudaMemcpyHostToDevice, s));
    patchify_rows<E>(visual, static_cast<const uint8_t*>(b.frames), static_cast<E*>(b.pixels),
                     path_, s);
    CLEF_CUDA_CHECK(cudaMemcpyAsync(b.rc, rc, rc_bytes, cudaMemcpyHostToDevice, s));
    CLEF_CUDA_CHECK(cudaMemcpyAsync(b.tiles, ht, tile_bytes, cudaMemcpyHostToDevice, s));
  }
  mark("start");

  E* x = static_cast<E*>(b.x);
  E* u = static_cast<E*>(b.u);
  E* mid = static_cast<E*>(b.mid);
  gemm(patch_, b.pixels, R, x, false, s);
  mark("vision.gemm");
  if (!gemms_only) {
    int64_t row0 = 0;
    for (const media::Grid& g : grids) {
      vision_pos_embed_add<E>(x, static_cast<int>(row0), static_cast<const E*>(pos_table_), side_,
                              g.t, g.h, g.w, W_, path_, s);
      row0 += g.patches();
    }
    mark("vision.elementwise");
  }
  AttnSequences seqs;
  seqs.tiles = b.tiles;
  seqs.tile_slots = tile_slots;
  seqs.causal = false;
  seqs.scale = 1.0f / std::sqrt(static_cast<float>(hd_));
  const VisionRopeArgs ra{R, heads_, hd_, hdp_, b.rc, inv_freq_, kv_tiles};
  for (const Block& blk : blocks_) {
    if (!gemms_only) {
      layer_norm<E>(x, blk.norm1_w, blk.norm1_b, u, R, W_, kEps, path_, s);
      mark("vision.elementwise");
    }
    gemm(blk.qkv, u, R, b.qkv, false, s);
    mark("vision.gemm");
    if (!gemms_only) {
      E* q = static_cast<E*>(b.q);
      E* k = static_cast<E*>(b.k);
      E* v = static_cast<E*>(b.v);
      vision_rope_split<E>(static_cast<const E*>(b.qkv), q, k, v, ra, path_, s);
      mark("vision.elementwise");
      if constexpr (std::is_same_v<E, float>)
        attention_core_f32(q, k, v, static_cast<float*>(b.attn), R, heads_, heads_, hdp_, s, &seqs);
      else
        attention_core_bf16_variant(attn, q, k, v, static_cast<bf16*>(b.attn), R, heads_, heads_,
                                    hdp_, s, &seqs);
      mark("vision.attention");
    }
    gemm(blk.proj, b.attn, R, x, true, s);
    mark("vision.gemm");
    if (!gemms_only) {
      layer_norm<E>(x, blk.norm2_w, blk.norm2_b, u, R, W_, kEps, path_, s);
      mark("vision.elementwise");
    }
    gemm(blk.fc1, u, R, mid, false, s, fused_gelu_);
    mark("vision.gemm");
    if (!gemms_only && !fused_gelu_) {
      gelu_inplace<E>(mid, static_cast<size_t>(R) * I_, GeluKind::Tanh, path_, s);
      mark("vision.elementwise");
    }
    gemm(blk.fc2, mid, R, x, true, s);
    mark("vision.gemm");
  }
  // Merger: LayerNorm per patch, each 2 x 2 block's 4 consecutive rows read as one [4W] row.
  if (!gemms_only) {
    layer_norm<E>(x, merger_norm_w_, merger_norm_b_, u, R, W_, kEps, path_, s);
    mark("vision.elementwise");
  }
  const int tokens = R / 4;
  gemm(merger_fc1_, u, tokens, b.merged, false, s);
  mark("vision.gemm");
  if (!gemms_only) {
    gelu_inplace<E>(static_cast<E*>(b.merged), static_cast<size_t>(tokens) * M_, GeluKind::Erf,
                    path_, s);
    mark("vision.elementwise");
  }
  gemm(merger_fc2_, b.merged, tokens, b.out, false, s);
  mark("vision.gemm");
}

}  // namespace clef::engine::cuda

#include "engine/cuda/workspace.h"

#include <algorithm>

#include "engine/cuda/attention/kv_tiles.h"
#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/packing.h"

namespace clef::engine::cuda {

Workspace::Workspace(const model::TextConfig& config, DataType act, int max_in_proj, bool fp8)
    : cfg_(config), act_(act), max_in_proj_(max_in_proj), fp8_(fp8) {}

bool Workspace::reserve(int tokens) {
  if (tokens <= tokens_) return false;
  const auto& c = cfg_;
  const size_t T = static_cast<size_t>(tokens), es = data_type_bytes(act_);
  const size_t D = c.hidden_size;
  const size_t mixer = std::max({c.linear_num_value_heads * c.linear_value_head_dim,
                                 c.num_attention_heads * c.head_dim, c.intermediate_size});
  const size_t gk = T * c.linear_num_key_heads * c.linear_key_head_dim * 4;
  const size_t gv = T * c.linear_num_value_heads * c.linear_value_head_dim;
  // Two passes over the same list: sizes (offsets 256-byte aligned), then pointers.
  char* base = nullptr;
  size_t off = 0;
  auto carve = [&](auto*& p, size_t bytes) {
    using P = std::remove_reference_t<decltype(p)>;
    p = base ? reinterpret_cast<P>(base + off) : nullptr;
    off += (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  };
  auto layout = [&] {
    off = 0;
    carve(a_.residual, T * D * es);
    carve(a_.normed, T * D * es);
    carve(a_.final_hidden, T * D * es);
    carve(a_.proj, T * max_in_proj_ * es);
    carve(a_.mixer_out, T * mixer * es);
    carve(a_.gdn_q, gk);
    carve(a_.gdn_k, gk);
    carve(a_.gdn_v, gv * 4);
    carve(a_.gdn_rq, T * c.linear_num_key_heads * 4);
    carve(a_.gdn_rk, T * c.linear_num_key_heads * 4);
    carve(a_.gdn_g, T * c.linear_num_value_heads * 4);
    carve(a_.gdn_beta, T * c.linear_num_value_heads * 4);
    carve(a_.gdn_out, gv * es);
    carve(a_.gdn_scratch,
          gdn_workspace_bytes(tokens, c.linear_num_value_heads, c.linear_key_head_dim,
                              c.linear_value_head_dim, kMaxPackedSequences));
    carve(a_.attn_q, T * c.num_attention_heads * c.head_dim * es);
    // (k and v: room for key tiles, attention/kv_tiles.h, which the bf16 backbone may write)
    const size_t kv = kv_tiled_elems(static_cast<int>(T), c.num_key_value_heads, c.head_dim,
                                     kMaxPackedSequences) *
                      es;
    carve(a_.attn_k, std::max(kv, T * c.num_key_value_heads * c.head_dim * es));
    carve(a_.attn_v, std::max(kv, T * c.num_key_value_heads * c.head_dim * es));
    carve(a_.ids, T * 4);
    const size_t chunks = gdn_chunk_slots(tokens, kMaxPackedSequences);
    carve(a_.positions, T * 4);
    carve(a_.kv_rows, T * 4);
    carve(a_.chunk_row0, chunks * 4);
    carve(a_.chunk_valid, chunks * 4);
    carve(a_.seq_chunk0, (kMaxPackedSequences + 1) * 4);
    carve(a_.gdn_core, 4);
    carve(a_.tiles, attention_tile_slots(tokens, kMaxPackedSequences, 16) * 16);
    carve(a_.hidden_f32, T * D * 4);
    if (fp8_) {
      const size_t K = std::max(D, mixer);
      carve(a_.act_q, T * K);
      carve(a_.act_scale, (K + 127) / 128 * T * 4);
    }
  };
  layout();
  mem_ = DeviceBuffer();  // free first: the old and new blocks need not fit together
  mem_.resize(off);
  base = mem_.get<char>();
  layout();
  // The bf16 form of the GDN inputs in the fp32 form's buffers (workspace.h).
  a_.gdn_xq = reinterpret_cast<__nv_bfloat16*>(a_.gdn_q);
  a_.gdn_xk = reinterpret_cast<__nv_bfloat16*>(a_.gdn_k);
  a_.gdn_xv = reinterpret_cast<__nv_bfloat16*>(a_.gdn_v);
  tokens_ = tokens;
  ++growths_;
  return true;
}

}  // namespace clef::engine::cuda

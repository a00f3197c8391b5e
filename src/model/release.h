// A Clef release folder loaded for inference (docs/spec/model.md §1-2): configs, memory-mapped
// safetensors (single or sharded), the joint head, the tokenizer. Every tensor's shape is checked
// against the config at load time; any problem throws LoadError naming the file and the tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace clef::model {

class LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DType { BF16, F16, F32, F64, I64, I32, U8, BOOL, F8_E4M3 };
const char* dtype_name(DType d);
size_t dtype_size(DType d);

// The per-block scales of an FP8 weight (HF fine-grained FP8, `<name>_scale_inv`): element (r, c)
// of the [out, in] weight dequantises to e4m3(r, c) * at(r / block, c / block), in float32.
struct BlockScales {
  std::string name;          // the scale tensor's name in its file
  DType dtype = DType::F32;  // F32 or BF16
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0;  // ceil(out / block), ceil(in / block)
  int block = 128;

  float at(int64_t block_row, int64_t block_col) const;
};

// A view into a memory-mapped safetensors file (the mapping lives as long as the Release).
struct Tensor {
  std::string name;  // canonical name (backbone: without "model.language_model."/"model." prefix)
  std::string file;  // file it came from (for error messages)
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  bool round_to_bf16 = true;  // loading rule: F32/F16 values are rounded to bf16 before use
  // F8_E4M3 weights only (2-D): their block scales. Dequantised values are e4m3 * scale in float32
  // (not bf16-rounded: they are what the FP8 GEMM computes with).
  std::shared_ptr<const BlockScales> scales;

  size_t numel() const;
  // Element i as the engine must use it (bf16-rounded per the loading rule when round_to_bf16).
  float at(size_t i) const;
  // Elements [offset, offset + n) into out, converted as at() does.
  void to_float(float* out, size_t offset, size_t n) const;
  std::vector<float> to_float() const;
};

enum class LayerType { LinearAttention, FullAttention };

struct TextConfig {
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int intermediate_size = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int linear_num_key_heads = 0;
  int linear_num_value_heads = 0;
  int linear_key_head_dim = 0;
  int linear_value_head_dim = 0;
  int linear_conv_kernel_dim = 4;
  int vocab_size = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1e7;
  double partial_rotary_factor = 0.25;
  std::vector<LayerType> layer_types;
  // Multimodal RoPE (docs/spec/media.md §6): rotary frequency i of the full-attention layers takes
  // its angle from the temporal, height or width position, interleaved (i % 3 == 1 below 3·s[1]:
  // height, i % 3 == 2 below 3·s[2]: width, else temporal). Empty when the config has none (a text
  // model: every position is (p, p, p), so the split does not matter).
  std::vector<int> mrope_section;
};

// The vision tower (`vision_config`, docs/spec/media.md §7).
struct VisionConfig {
  int depth = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_heads = 0;
  int in_channels = 3;
  int patch_size = 16;
  int temporal_patch_size = 2;
  int spatial_merge_size = 2;
  int out_hidden_size = 0;          // the backbone's width
  int num_position_embeddings = 0;  // a square table: side = sqrt(this)
  double rope_theta = 10000.0;      // the 2-D axial RoPE of the blocks
  int head_dim() const { return num_heads > 0 ? hidden_size / num_heads : 0; }
  int patch_values() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  int merged_width() const { return hidden_size * spatial_merge_size * spatial_merge_size; }
};

// config.json's `quantization_config` (HF fine-grained FP8, the only form accepted): e4m3 weights
// in block x block tiles with a float scale_inv per tile, activations quantised at run time.
struct QuantizationConfig {
  bool fp8 = false;  // false: no quantization_config (a bf16/fp32 release)
  int block = 128;
  // Module names kept unquantised (HF matches them as substrings of the full module name).
  std::vector<std::string> modules_to_not_convert;
};

struct HeadConfig {
  int hidden_size = 0;  // D
  int width = 0;        // W
  int routing_layers = 0;
  int layers = 0;
  int heads = 0;
  int feedforward = 0;  // F
};

struct LoadOptions {
  bool round_to_bf16 = true;  // the reference's dtype=bfloat16 loading rule
  std::string verify_file;    // sha256sum-format file to check before loading ("" = no check)
  std::string revision;       // overrides the revision read from a HF cache path
  std::function<void(const std::string&)> progress;  // one line per step (stderr in the CLI)
};

class Release {
 public:
  static std::shared_ptr<const Release> load(const std::string& dir, const LoadOptions& opts = {});

  std::string dir;
  std::string name;      // folder name (default served model name)
  std::string revision;  // HF snapshot commit, --revision, or "unknown"
  bool weights_sha256_verified = false;
  TextConfig text;
  QuantizationConfig quantization;
  HeadConfig head;
  // Present when config.json has a `vision_config` and the weights hold `model.visual.*`.
  std::optional<VisionConfig> vision;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;

  // Backbone tensors by canonical name: "embed_tokens.weight", "norm.weight", "lm_head.weight",
  // "layers.{i}.{input_layernorm,...}.weight". Throws LoadError when absent.
  const Tensor& backbone(const std::string& name) const;
  // Vision tower tensors by their name without "model.visual." ("blocks.0.attn.qkv.weight").
  const Tensor& visual(const std::string& name) const;
  const std::map<std::string, Tensor>& visual_tensors() const { return visual_; }
  // Joint head tensors by their name in joint_head.safetensors.
  const Tensor& head_tensor(const std::string& name) const;
  const std::map<std::string, Tensor>& backbone_tensors() const { return backbone_; }
  const std::map<std::string, Tensor>& head_tensors() const { return head_; }

  ~Release();
  Release();

 private:
  friend struct ReleaseLoader;
  std::map<std::string, Tensor> backbone_;
  std::map<std::string, Tensor> head_;
  std::map<std::string, Tensor> visual_;
  std::vector<std::shared_ptr<void>> mappings_;  // keeps the mmaps alive
};

}  // namespace clef::model

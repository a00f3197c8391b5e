// Random-weight Clef releases for tests, demos and benchmarks: a complete release folder
// (HF-loadable config.json, bf16 safetensors sharded with an index when large, joint head,
// tokenizer), HF-style init, bit-identical for a given preset + seed + tokenizer (counter-based
// RNG, so generation runs on all cores and stays deterministic).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/release.h"

namespace clef::model {

struct MakeModelOptions {
  std::string preset = "tiny";  // tiny | small | flash | clef
  std::string out_dir;
  uint64_t seed = 0;
  std::string tokenizer;  // tokenizer.json file or a folder holding one; "" = the embedded tiny-bpe
  bool overwrite = false;  // replace an existing non-empty out_dir
  uint64_t shard_bytes = uint64_t{4}
                         << 30;  // backbone shards at most this large (one file if it fits)
  int threads = 0;               // 0 = all cores
  std::function<void(const std::string&)> progress;
};

struct ModelPreset {
  TextConfig text;  // vocab_size 0 = the tokenizer's size rounded up to a multiple of 64
  HeadConfig head;
  VisionConfig vision;  // out_hidden_size = text.hidden_size
};

std::vector<std::string> make_model_presets();
// Throws std::invalid_argument for an unknown name.
ModelPreset make_model_preset(const std::string& name);

// Writes the release into a private "<out_dir>.partial-<pid>" folder, renamed to out_dir when
// complete (removed on failure). Throws std::runtime_error.
void make_model(const MakeModelOptions& opts);

}  // namespace clef::model

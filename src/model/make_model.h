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

struct ModelPreset {
  TextConfig text;  // vocab_size 0 = the tokenizer's size rounded up to a multiple of 64
  HeadConfig head;
  VisionConfig vision;  // out_hidden_size = text.hidden_size
};

struct MakeModelOptions {
  std::string preset = "tiny";  // tiny | small | flash | clef
  std::string out_dir;
  uint64_t seed = 0;
  std::string tokenizer;  // tokenizer.json file or a folder holding one; "" = the embedded tiny-bpe
  bool overwrite = false;  // replace an existing non-empty out_dir
  uint64_t shard_bytes = uint64_t{4}
                         << 30;  // backbone shards at most this large (one file if it fits)
  int threads = 0;               // 0 = all cores
  // "bf16", or "fp8": the backbone's big projections in HF fine-grained FP8 (e4m3, 128x128 blocks,
  // F32 weight_scale_inv = amax / 448), quantised from exactly the bf16 values the same seed gives.
  std::string dtype = "bf16";
  // "gaussian" (HF-style N(0, 0.02²) init) or "realistic": heavy tails and outlier channels
  // (docs/engine.md "Realistic weights"). The vision tower and the joint head are the same in both.
  std::string weights = "gaussian";
  std::function<void(const std::string&)> progress;
  // Applied to the preset before anything is written: a release of other dimensions (tests: a
  // vision tower of head dim 72 on the tiny backbone). Null: the preset as it is.
  std::function<void(ModelPreset&)> adjust_preset;
};

std::vector<std::string> make_model_presets();
// Throws std::invalid_argument for an unknown name.
ModelPreset make_model_preset(const std::string& name);

// Writes the release into a private "<out_dir>.partial-<pid>" folder, renamed to out_dir when
// complete (removed on failure). Throws std::runtime_error.
void make_model(const MakeModelOptions& opts);

}  // namespace clef::model

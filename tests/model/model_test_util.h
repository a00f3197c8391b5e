// Helpers for the model-layer tests: scratch folders holding (mutated) copies of the golden
// releases.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "model/release.h"
#include "model/safetensors.h"
#include "support/scratch_dir.h"

namespace clef::model::testing {

namespace fs = std::filesystem;

inline std::string golden(const std::string& rel) {
  return std::string(CLEF_SOURCE_DIR) + "/tests/golden/" + rel;
}

using clef::testing::ScratchDir;

// Copies tests/golden/models/<name> into a new subfolder of `scratch` and returns its path.
inline std::string copy_release(const ScratchDir& scratch, const std::string& name) {
  fs::path dst = scratch.path() / name;
  fs::copy(golden("models/" + name), dst, fs::copy_options::recursive);
  return dst.string();
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

inline void edit_json(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(read_file(path));
  edit(j);
  write_file(path, j.dump(2));
}

// Rewrites a safetensors file through a function over its tensors (views into the old mapping; the
// new file is written next to it and renamed over it, so the views stay valid while writing).
inline void rewrite_safetensors(const std::string& path,
                                const std::function<void(std::vector<Tensor>&)>& edit) {
  auto f = SafetensorsFile::open(path);
  std::vector<Tensor> tensors = f->tensors();
  edit(tensors);
  write_safetensors(path + ".new", tensors, f->metadata());
  fs::rename(path + ".new", path);
}

// Rewrites the raw JSON header of a safetensors file, keeping the data bytes as they are.
inline void edit_safetensors_header(const std::string& path,
                                    const std::function<void(nlohmann::json&)>& edit) {
  std::string bytes = read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n));
  edit(h);
  std::string hs = h.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((hs.size() >> (8 * i)) & 0xff);
  write_file(path, out + hs + bytes.substr(8 + n));
}

// Runs `f` and returns the LoadError message; fails the test when nothing (or something else) is
// thrown.
template <typename F>
std::string load_error(F&& f) {
  try {
    f();
  } catch (const LoadError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected LoadError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected LoadError, nothing was thrown";
  return "";
}

}  // namespace clef::model::testing

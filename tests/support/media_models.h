// Shared by the CPU and CUDA media tests: JSON-lines fixtures, and a golden model with its vision
// tower taken away (the same release without `vision_config`: a text model whose engines must
// refuse media).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/golden_models.h"
#include "json/value.h"
#include "model/release.h"
#include "support/parse_json.h"

namespace clef::testing {

// golden model `model` copied to a scratch folder without its vision_config, loaded, and the folder
// removed (the loaded release keeps its mapped files).
inline std::shared_ptr<const model::Release> golden_without_tower(const std::string& model) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("clef-no-tower-" + model + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::copy(golden_dir() + "/" + model, dir, fs::copy_options::recursive);
  fs::permissions(dir / "config.json", fs::perms::owner_write, fs::perm_options::add);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  cfg.erase("vision_config");
  std::ofstream(dir / "config.json") << cfg.dump(2);
  auto release = model::Release::load(dir.string());
  fs::remove_all(dir);
  return release;
}

}  // namespace clef::testing

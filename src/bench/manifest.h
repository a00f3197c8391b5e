// Benchmark manifests (docs/spec/benchmark.md): JevBench records ({"id", "state", "question",
// "labels", "expected", "split", ...}, one question each) or System1-Omni lines ({"id", "request",
// "expected"}). Each line becomes one request body plus what the bench needs to check and score its
// answer.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "encoding/request.h"

namespace clef::bench {

struct ManifestError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The protocol's question types and their names come from the encoding layer (one definition).
using encoding::QuestionType;

struct QuestionSpec {
  std::string id;
  QuestionType type = QuestionType::Noul;
  // The answer's probability keys: choice = criteria keys in request order; score = "0".."n-1";
  // noul: none.
  std::vector<std::string> options;
  // Order in which ties between equally probable options are broken (JevBench: `labels` order).
  std::vector<std::string> tie_order;
  // Checked expected value: noul "yes"/"no", choice an option key, score an integer level.
  std::optional<std::string> expected_label;  // noul / choice
  std::optional<long long> expected_level;    // score
};

struct Item {
  std::string id;
  std::string tier;
  std::string model;  // the request's "model"
  std::string body;   // the request JSON text sent as-is
  std::vector<QuestionSpec> questions;
  bool has_expected() const;
};

struct ManifestOptions {
  std::string model = "clef-flash";  // JevBench records: the request's model
  bool override_model = false;       // also replace "model" inside {"request": ...} lines
  // Where an item's tier comes from: "" = the record's "tier" field, else "split", else "all";
  // "id-prefix" = the id up to its first '-' (Public231 ids start with their tier); any other
  // name = that field of the record.
  std::string tier_key;
};

struct Manifest {
  std::string path;
  std::string sha256;  // of the file's bytes
  std::vector<Item> items;
};

// Throws ManifestError ("FILE:LINE: why") on unreadable files, malformed lines, questions the bench
// could not check an answer against, and expected values that are not one of the question's
// options.
Manifest load_manifest(const std::string& path, const ManifestOptions& opts);
// Same from text (path is only used in messages).
Manifest parse_manifest(const std::string& text, const std::string& path,
                        const ManifestOptions& opts);

}  // namespace clef::bench

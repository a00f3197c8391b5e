// Pre-tokenizers of tokenizer.json: Split (regex or string pattern, any delimiter behaviour,
// invert), Digits, Punctuation and ByteLevel (which must come last; use_regex applies the GPT-2
// split), alone or in a Sequence. Unsupported types or options are refused at load time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex.h"

namespace clef::tokenizer {

class PreTokenizer {
 public:
  PreTokenizer() = default;  // no pre-tokenizer: the whole piece is one word
  static PreTokenizer from_json(const nlohmann::json& j);  // j may be null

  // Whether words are byte strings to map through the GPT-2 byte map (a ByteLevel step is present).
  bool byte_level() const { return byte_level_; }

  // Splits a normalized piece into words (byte ranges of piece, in order, none empty).
  struct Range {
    size_t begin, end;
  };
  void split(std::string_view piece, std::vector<Range>& words) const;

  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

 private:
  struct SplitStep {
    Regex regex;
    Behavior behavior;
    bool invert;
  };
  void add_step(const nlohmann::json& j);
  std::vector<SplitStep> steps_;
  bool byte_level_ = false;
};

}  // namespace clef::tokenizer

// Pre-tokenizers of tokenizer.json: Split (regex or string pattern, any delimiter behaviour,
// invert), Digits, Punctuation and ByteLevel (which must come last; add_prefix_space, and
// use_regex for the GPT-2 split), alone or in a Sequence. Unsupported types or options are refused
// at load time.
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

  struct Range {
    size_t begin, end;
  };
  // Per-call working memory of split().
  struct Scratch {
    std::vector<Range> ranges, next;
    std::string prefixed;  // ByteLevel add_prefix_space: the pieces with their added space
  };
  // Splits a normalized piece into words, in order, none empty. The views point into piece or into
  // scratch, and stay valid until the next call with the same scratch.
  void split(std::string_view piece, Scratch& scratch, std::vector<std::string_view>& words) const;

  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

 private:
  struct SplitStep {
    Regex regex;
    Behavior behavior;
    bool invert;
  };
  void add_step(const nlohmann::json& j);
  static void split_one(const SplitStep& step, std::string_view piece, const Range& r,
                        std::vector<Range>& out);
  std::vector<SplitStep> steps_;
  bool byte_level_ = false;
  // ByteLevel(add_prefix_space=true): each piece reaching it gets a leading space (unless it starts
  // with one), then the GPT-2 split when use_regex.
  bool prefix_space_ = false;
  std::vector<SplitStep> after_prefix_;
};

}  // namespace clef::tokenizer

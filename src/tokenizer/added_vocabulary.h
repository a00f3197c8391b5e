// HF tokenizers' AddedVocabulary: added tokens (special or not) are cut out of the text before the
// normalizer and the model see it. Tokens with normalized=false are matched on the raw text, those
// with normalized=true on the normalized text; leftmost-longest, honouring
// single_word/lstrip/rstrip.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace clef::tokenizer {

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// A split of a piece of text: either an added token (id >= 0) or text still to tokenize (id < 0).
struct AddedSplit {
  size_t begin, end;
  int32_t id;
};

class PatternSet {
 public:
  void add(std::string pattern, int32_t id);
  // Leftmost-longest match starting at or after from; false when none.
  bool find(std::string_view text, size_t from, size_t& start, size_t& end, int32_t& id) const;
  bool empty() const { return patterns_.empty(); }

 private:
  struct Pattern {
    std::string text;
    int32_t id;
  };
  std::vector<Pattern> patterns_;
  std::vector<std::vector<size_t>> by_first_byte_ = std::vector<std::vector<size_t>>(256);
};

class AddedVocabulary {
 public:
  // Adds tokens the way HF's deserializer does: an existing vocab entry keeps its id, a new content
  // gets the next id after the model vocab. model_id(content) -> id in the model vocab, if any.
  template <typename ModelLookup>
  void add_tokens(const std::vector<AddedToken>& tokens, size_t model_vocab_entries,
                  ModelLookup model_id);

  // Builds the two pattern sets; normalize maps a token's content to its normalized form.
  template <typename Normalize>
  void build(Normalize normalize);

  // HF find_matches over one piece with the raw (normalized=false) or normalized pattern set.
  void find_matches(std::string_view piece, bool normalized_set,
                    std::vector<AddedSplit>& out) const;

  std::optional<int32_t> token_to_id(std::string_view content) const;
  const AddedToken* token(int32_t id) const;
  bool is_special(std::string_view content) const {
    return special_set_.count(std::string(content)) != 0;
  }
  int32_t max_id() const;
  bool empty() const { return map_.empty(); }

 private:
  std::unordered_map<std::string, int32_t> map_;
  std::unordered_map<int32_t, AddedToken> map_r_;
  std::vector<AddedToken> added_;    // non-special, in order
  std::vector<AddedToken> special_;  // special, in order
  std::unordered_set<std::string> special_set_;
  PatternSet raw_set_;
  PatternSet normalized_set_;
};

template <typename ModelLookup>
void AddedVocabulary::add_tokens(const std::vector<AddedToken>& tokens, size_t model_vocab_entries,
                                 ModelLookup model_id) {
  for (const AddedToken& t : tokens) {
    if (t.special && !t.content.empty() && special_set_.insert(t.content).second)
      special_.push_back(t);
  }
  const auto vocab_size = static_cast<int32_t>(model_vocab_entries);
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    bool duplicate = false;
    for (const auto& [id, existing] : map_r_) {
      if (existing.content == t.content && existing.single_word == t.single_word &&
          existing.lstrip == t.lstrip && existing.rstrip == t.rstrip &&
          existing.normalized == t.normalized && existing.special == t.special) {
        duplicate = true;
        break;
      }
    }
    if (duplicate) continue;
    int32_t new_id;
    if (auto it = map_.find(t.content); it != map_.end()) {
      new_id = it->second;
    } else if (std::optional<int32_t> mid = model_id(t.content)) {
      new_id = *mid;
    } else if (map_.empty()) {
      new_id = vocab_size;
    } else {
      int32_t mx = max_id();
      new_id = (mx >= vocab_size || vocab_size == 0) ? mx + 1 : vocab_size;
    }
    map_[t.content] = new_id;
    map_r_[new_id] = t;
    if (special_set_.count(t.content) == 0) added_.push_back(t);
  }
}

template <typename Normalize>
void AddedVocabulary::build(Normalize normalize) {
  raw_set_ = PatternSet();
  normalized_set_ = PatternSet();
  auto add = [&](const AddedToken& t) {
    int32_t id = map_.at(t.content);
    if (t.normalized) {
      normalized_set_.add(normalize(t.content), id);
    } else {
      raw_set_.add(t.content, id);
    }
  };
  for (const AddedToken& t : special_) add(t);
  for (const AddedToken& t : added_) add(t);
}

}  // namespace clef::tokenizer

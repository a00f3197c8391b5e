// The BPE model of tokenizer.json (HF tokenizers semantics): vocab, merges (ranked by their order,
// in the "a b" or ["a", "b"] format), unk_token / fuse_unk, byte_fallback,
// continuing_subword_prefix, end_of_word_suffix, ignore_merges. Results are cached per word.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/merge_table.h"
#include "tokenizer/string_keys.h"
#include "tokenizer/word_cache.h"

namespace clef::tokenizer {

class BpeModel {
 public:
  // byte_level: words arrive as raw bytes and are mapped through the GPT-2 byte map. streamed_vocab
  // holds vocab entries the JSON parser streamed past the DOM (they come after model["vocab"]'s
  // own).
  using VocabEntries = std::vector<std::pair<std::string, nlohmann::json>>;
  static std::unique_ptr<BpeModel> from_json(const nlohmann::json& model, bool byte_level,
                                             const VocabEntries& streamed_vocab);

  // Per-call working memory, so that concurrent calls share nothing but the cache.
  struct Scratch {
    struct Symbol {
      int32_t id;
      int32_t prev;
      int32_t next;
      bool alive;
    };
    struct Merge {
      uint32_t rank;
      int32_t pos;
      int32_t new_id;
    };
    std::vector<Symbol> symbols;
    std::vector<Merge> heap;
    std::vector<int32_t> ids;
  };

  // Appends the ids of one pre-token word.
  void tokenize(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;
  size_t vocab_entries() const { return vocab_.size(); }  // HF Model::get_vocab_size
  int32_t max_id() const { return max_id_; }
  void clear_cache() const { cache_.clear(); }

 private:
  BpeModel() : cache_(kCacheCapacity) {}
  static constexpr size_t kCacheCapacity = 200000;
  static constexpr size_t kMaxCachedWordBytes = 256;

  // How one initial character becomes symbols when it is not a vocab entry.
  struct Initial {
    std::vector<int32_t> ids;  // one vocab id, or byte-fallback ids
    bool found = false;        // false: unknown (unk token or dropped)
    bool fallback = false;     // ids came from byte fallback
  };
  Initial lookup_initial(std::string_view ch, bool is_first, bool is_last) const;
  void initial_symbols(std::string_view word, Scratch& scratch) const;
  void merge_all(Scratch& scratch) const;

  std::unordered_map<std::string, int32_t, StringKeyHash, StringKeyEq> vocab_;
  std::unordered_map<int32_t, const std::string*> vocab_r_;  // points at vocab_ keys (stable nodes)
  int32_t max_id_ = -1;
  MergeTable merges_;
  std::optional<std::string> unk_token_;
  std::string prefix_;  // continuing_subword_prefix ("" when null)
  std::string suffix_;  // end_of_word_suffix ("" when null)
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool byte_level_ = false;
  ByteLevelMap byte_map_;
  // Byte-level fast path: initial symbols per (is_first, is_last) variant and byte.
  std::array<std::array<Initial, 256>, 4> byte_initial_;
  mutable WordCache cache_;
};

}  // namespace clef::tokenizer

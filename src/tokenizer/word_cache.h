// Bounded, thread-safe cache of BPE results per pre-token word (HF keeps one too). When it fills up
// it is cleared, which bounds memory while keeping the hot vocabulary of a workload resident.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/string_keys.h"

namespace clef::tokenizer {

class WordCache {
 public:
  explicit WordCache(size_t capacity) : capacity_(capacity) {}

  // Appends the cached ids of word to out; false when absent.
  bool lookup(std::string_view word, std::vector<int32_t>& out) const {
    std::shared_lock lock(mutex_);
    auto it = map_.find(word);
    if (it == map_.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void insert(std::string_view word, const int32_t* ids, size_t n) {
    if (capacity_ == 0) return;
    std::unique_lock lock(mutex_);
    if (map_.size() >= capacity_) map_.clear();
    map_.try_emplace(std::string(word), ids, ids + n);
  }

  void clear() {
    std::unique_lock lock(mutex_);
    map_.clear();
  }

  size_t size() const {
    std::shared_lock lock(mutex_);
    return map_.size();
  }

 private:
  size_t capacity_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, std::vector<int32_t>, StringKeyHash, StringKeyEq> map_;
};

}  // namespace clef::tokenizer

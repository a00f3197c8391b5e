// Open-addressing hash map from a token-id pair to its merge (rank, merged id): the BPE inner loop
// does one lookup per adjacent pair, so this avoids std::unordered_map's node chasing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace clef::tokenizer {

struct MergeValue {
  uint32_t rank;
  int32_t new_id;
};

class MergeTable {
 public:
  explicit MergeTable(size_t expected = 0);
  // Later inserts of the same pair replace earlier ones (HF collects merges into a HashMap).
  void insert_or_assign(int32_t a, int32_t b, MergeValue v);
  const MergeValue* find(int32_t a, int32_t b) const {
    uint64_t key = pack(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = entries_[i];
      if (e.key == key) return &e.value;
      if (e.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ULL;
  struct Entry {
    uint64_t key;
    MergeValue value;
  };
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t key) const {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<size_t>(key) & mask_;
  }
  void grow();
  std::vector<Entry> entries_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace clef::tokenizer

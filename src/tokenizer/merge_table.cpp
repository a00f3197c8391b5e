#include "tokenizer/merge_table.h"

namespace clef::tokenizer {

MergeTable::MergeTable(size_t expected) {
  size_t cap = 16;
  while (cap < expected * 2) cap <<= 1;
  entries_.assign(cap, Entry{kEmpty, {0, 0}});
  mask_ = cap - 1;
}

void MergeTable::grow() {
  std::vector<Entry> old;
  old.swap(entries_);
  entries_.assign(old.size() * 2, Entry{kEmpty, {0, 0}});
  mask_ = entries_.size() - 1;
  size_ = 0;
  for (const Entry& e : old) {
    if (e.key == kEmpty) continue;
    size_t i = slot(e.key);
    while (entries_[i].key != kEmpty) i = (i + 1) & mask_;
    entries_[i] = e;
    ++size_;
  }
}

void MergeTable::insert_or_assign(int32_t a, int32_t b, MergeValue v) {
  if ((size_ + 1) * 2 > entries_.size()) grow();
  uint64_t key = pack(a, b);
  size_t i = slot(key);
  while (entries_[i].key != kEmpty && entries_[i].key != key) i = (i + 1) & mask_;
  if (entries_[i].key == kEmpty) ++size_;
  entries_[i] = Entry{key, v};
}

}  // namespace clef::tokenizer

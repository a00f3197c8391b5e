#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/char_class.h"
#include "tokenizer/utf8.h"

namespace clef::tokenizer {
namespace {

char32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t len = 0;
  return utf8::decode(s, i, len);
}

char32_t first_char(std::string_view s) {
  size_t len = 0;
  return utf8::decode(s, 0, len);
}

// Start of the run of white space that ends s (Rust regex `\s*$`).
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    size_t len = 0;
    if (!is_white_space(utf8::decode(s, i, len))) break;
    end = i;
  }
  return end;
}

// Length of the run of white space that starts s (Rust regex `^\s*`).
size_t leading_space_length(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t len = 0;
    if (!is_white_space(utf8::decode(s, pos, len))) break;
    pos += len;
  }
  return pos;
}

}  // namespace

void PatternSet::add(std::string pattern, int32_t id) {
  if (pattern.empty()) return;
  by_first_byte_[static_cast<unsigned char>(pattern[0])].push_back(patterns_.size());
  patterns_.push_back({std::move(pattern), id});
}

bool PatternSet::find(std::string_view text, size_t from, size_t& start, size_t& end,
                      int32_t& id) const {
  if (patterns_.empty()) return false;
  for (size_t i = from; i < text.size(); ++i) {
    const auto& cands = by_first_byte_[static_cast<unsigned char>(text[i])];
    if (cands.empty()) continue;
    size_t best_len = 0;
    int32_t best_id = -1;
    for (size_t idx : cands) {  // in insertion order: the first of equal patterns wins
      const Pattern& p = patterns_[idx];
      if (p.text.size() > best_len && text.compare(i, p.text.size(), p.text) == 0) {
        best_len = p.text.size();
        best_id = p.id;
      }
    }
    if (best_len > 0) {
      start = i;
      end = i + best_len;
      id = best_id;
      return true;
    }
  }
  return false;
}

void AddedVocabulary::find_matches(std::string_view piece, bool normalized_set,
                                   std::vector<AddedSplit>& out) const {
  const PatternSet& set = normalized_set ? normalized_set_ : raw_set_;
  size_t start_offset = 0;
  size_t search = 0;
  size_t mstart = 0, mend = 0;
  int32_t id = -1;
  while (set.find(piece, search, mstart, mend, id)) {
    search = mend;  // the matcher resumes after the match itself, not after stripped spaces
    size_t start = mstart, stop = mend;
    const AddedToken& tok = map_r_.at(id);
    if (tok.single_word) {
      bool start_space = start == 0 || !is_word_char(last_char(piece.substr(0, start)));
      bool stop_space = stop == piece.size() || !is_word_char(first_char(piece.substr(stop)));
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) start = std::max(trailing_space_start(piece.substr(0, start)), start_offset);
    if (tok.rstrip) stop += leading_space_length(piece.substr(stop));
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, id});
    start_offset = stop;
  }
  if (start_offset != piece.size()) out.push_back({start_offset, piece.size(), -1});
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = map_.find(std::string(content));
  if (it == map_.end()) return std::nullopt;
  return it->second;
}

const AddedToken* AddedVocabulary::token(int32_t id) const {
  auto it = map_r_.find(id);
  return it == map_r_.end() ? nullptr : &it->second;
}

int32_t AddedVocabulary::max_id() const {
  int32_t mx = -1;
  for (const auto& [content, id] : map_) mx = std::max(mx, id);
  return mx;
}

}  // namespace clef::tokenizer

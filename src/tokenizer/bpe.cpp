#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace clef::tokenizer {
namespace {

std::string optional_string(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "";
  if (!j[key].is_string())
    throw TokenizerError(std::string("tokenizer.json: model.") + key + " must be a string");
  return j[key].get<std::string>();
}

bool optional_bool(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return false;
  if (!j[key].is_boolean())
    throw TokenizerError(std::string("tokenizer.json: model.") + key + " must be a boolean");
  return j[key].get<bool>();
}

// Min-heap order of HF's Word::merge_all: lowest rank first, then leftmost position.
bool heap_less(const BpeModel::Scratch::Merge& a, const BpeModel::Scratch::Merge& b) {
  if (a.rank != b.rank) return a.rank > b.rank;
  return a.pos > b.pos;
}

}  // namespace

std::unique_ptr<BpeModel> BpeModel::from_json(const nlohmann::json& m, bool byte_level,
                                              const VocabEntries& streamed_vocab) {
  if (!m.is_object()) throw TokenizerError("tokenizer.json: \"model\" must be an object");
  if (m.contains("type") && !(m["type"].is_string() && m["type"].get<std::string>() == "BPE")) {
    throw TokenizerError("tokenizer.json: unsupported model type " + m["type"].dump() +
                         " (only BPE)");
  }
  if (m.contains("dropout") && !m["dropout"].is_null() &&
      !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0)) {
    throw TokenizerError("tokenizer.json: BPE dropout is random and not supported");
  }
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  bpe->byte_level_ = byte_level;
  bpe->prefix_ = optional_string(m, "continuing_subword_prefix");
  bpe->suffix_ = optional_string(m, "end_of_word_suffix");
  if (m.contains("unk_token") && !m["unk_token"].is_null())
    bpe->unk_token_ = optional_string(m, "unk_token");
  bpe->fuse_unk_ = optional_bool(m, "fuse_unk");
  bpe->byte_fallback_ = optional_bool(m, "byte_fallback");
  bpe->ignore_merges_ = optional_bool(m, "ignore_merges");

  if (!m.contains("vocab") || !m["vocab"].is_object())
    throw TokenizerError("tokenizer.json: model.vocab must be an object");
  const auto& vocab = m["vocab"];
  bpe->vocab_.reserve(vocab.size() + streamed_vocab.size());
  auto add_entry = [&](const std::string& token, const nlohmann::json& value) {
    if (!value.is_number_unsigned() || value.get<uint64_t>() > 0x7FFFFFFF) {
      throw TokenizerError("tokenizer.json: vocab id of \"" + token + "\" is not a valid id");
    }
    auto id = static_cast<int32_t>(value.get<uint64_t>());
    bpe->vocab_.insert_or_assign(token, id);
    bpe->max_id_ = std::max(bpe->max_id_, id);
  };
  for (auto it = vocab.begin(); it != vocab.end(); ++it) add_entry(it.key(), it.value());
  for (const auto& [token, value] : streamed_vocab) add_entry(token, value);
  bpe->vocab_r_.reserve(bpe->vocab_.size());
  for (const auto& [token, id] : bpe->vocab_) bpe->vocab_r_[id] = &token;

  if (!m.contains("merges") || !m["merges"].is_array())
    throw TokenizerError("tokenizer.json: model.merges must be an array");
  const auto& merges = m["merges"];
  bpe->merges_ = MergeTable(merges.size());
  auto vocab_id = [&](std::string_view tok, size_t rank) {
    auto it = bpe->vocab_.find(tok);
    if (it == bpe->vocab_.end()) {
      throw TokenizerError("tokenizer.json: merge " + std::to_string(rank + 1) + " uses \"" +
                           std::string(tok) + "\", which is not in the vocab");
    }
    return it->second;
  };
  std::string_view a, b;
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& e = merges[rank];
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        throw TokenizerError("tokenizer.json: merge " + std::to_string(rank + 1) + " (\"" + s +
                             "\") is not two tokens separated by one space");
      }
      a = std::string_view(s).substr(0, sp);
      b = std::string_view(s).substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get_ref<const std::string&>();
      b = e[1].get_ref<const std::string&>();
    } else {
      throw TokenizerError("tokenizer.json: merge " + std::to_string(rank + 1) +
                           " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    int32_t a_id = vocab_id(a, rank);
    int32_t b_id = vocab_id(b, rank);
    if (b.size() < bpe->prefix_.size()) {
      throw TokenizerError("tokenizer.json: merge " + std::to_string(rank + 1) +
                           " is shorter than the subword prefix");
    }
    joined.assign(a);
    joined.append(b.substr(bpe->prefix_.size()));
    int32_t new_id = vocab_id(joined, rank);
    bpe->merges_.insert_or_assign(a_id, b_id, MergeValue{static_cast<uint32_t>(rank), new_id});
  }

  if (byte_level) {
    for (int v = 0; v < 4; ++v) {
      for (int byte = 0; byte < 256; ++byte) {
        bpe->byte_initial_[v][byte] = bpe->lookup_initial(
            bpe->byte_map_.to_utf8(static_cast<unsigned char>(byte)), (v & 1) != 0, (v & 2) != 0);
      }
    }
  }
  return bpe;
}

BpeModel::Initial BpeModel::lookup_initial(std::string_view ch, bool is_first, bool is_last) const {
  std::string s;
  if (!is_first) s += prefix_;
  s += ch;
  if (is_last) s += suffix_;
  Initial r;
  if (auto it = vocab_.find(std::string_view(s)); it != vocab_.end()) {
    r.ids.push_back(it->second);
    r.found = true;
    return r;
  }
  if (byte_fallback_) {
    std::vector<int32_t> ids;
    for (unsigned char c : s) {
      char code[8];
      std::snprintf(code, sizeof code, "<0x%02X>", c);
      auto it = vocab_.find(std::string_view(code));
      if (it == vocab_.end()) break;
      ids.push_back(it->second);
    }
    if (ids.size() == s.size()) {
      r.ids = std::move(ids);
      r.found = true;
      r.fallback = true;
    }
  }
  return r;
}

void BpeModel::initial_symbols(std::string_view word, Scratch& scratch) const {
  auto& syms = scratch.symbols;
  syms.clear();
  auto add = [&](int32_t id) {
    auto n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, n + 1, true});
  };
  // Pending unknown run (HF merge_word): flushed before the next known symbol, fused when fuse_unk.
  bool unk_pending = false;
  int32_t unk_id = -1;
  auto unknown = [&] {
    if (!unk_token_) return;  // no unk token: the character is dropped, as in HF
    auto it = vocab_.find(std::string_view(*unk_token_));
    if (it == vocab_.end()) {
      throw TokenizerError("tokenizer.json: unk_token \"" + *unk_token_ + "\" is not in the vocab");
    }
    if (unk_pending && !fuse_unk_) add(unk_id);
    unk_pending = true;
    unk_id = it->second;
  };
  auto apply = [&](const Initial& init) {
    if (!init.found) {
      unknown();
      return;
    }
    if (!init.fallback && unk_pending) {
      add(unk_id);
      unk_pending = false;
    }
    for (int32_t id : init.ids) add(id);
  };
  if (byte_level_) {
    for (size_t i = 0; i < word.size(); ++i) {
      int v = (i == 0 ? 1 : 0) | (i + 1 == word.size() ? 2 : 0);
      apply(byte_initial_[v][static_cast<unsigned char>(word[i])]);
    }
  } else {
    size_t i = 0;
    while (i < word.size()) {
      size_t len = utf8::sequence_length(static_cast<unsigned char>(word[i]));
      apply(lookup_initial(word.substr(i, len), i == 0, i + len >= word.size()));
      i += len;
    }
  }
  if (unk_pending) add(unk_id);
  if (!syms.empty()) syms.back().next = -1;
}

void BpeModel::merge_all(Scratch& scratch) const {
  auto& syms = scratch.symbols;
  auto& heap = scratch.heap;
  heap.clear();
  for (size_t i = 0; i + 1 < syms.size(); ++i) {
    if (const MergeValue* m = merges_.find(syms[i].id, syms[i + 1].id)) {
      heap.push_back({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), heap_less);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), heap_less);
    Scratch::Merge top = heap.back();
    heap.pop_back();
    auto& cur = syms[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    const int32_t next_pos = cur.next;
    // Skip entries made stale by an earlier merge.
    const MergeValue* m = merges_.find(cur.id, syms[next_pos].id);
    if (m == nullptr || m->new_id != top.new_id) continue;
    cur.id = top.new_id;
    syms[next_pos].alive = false;
    cur.next = syms[next_pos].next;
    if (cur.next >= 0) syms[cur.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const MergeValue* pm = merges_.find(syms[cur.prev].id, cur.id)) {
        heap.push_back({pm->rank, cur.prev, pm->new_id});
        std::push_heap(heap.begin(), heap.end(), heap_less);
      }
    }
    if (cur.next >= 0) {
      if (const MergeValue* nm = merges_.find(cur.id, syms[cur.next].id)) {
        heap.push_back({nm->rank, top.pos, nm->new_id});
        std::push_heap(heap.begin(), heap.end(), heap_less);
      }
    }
  }
}

void BpeModel::tokenize(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it =
        byte_level_ ? vocab_.find(std::string_view(byte_map_.encode(word))) : vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (byte_level_ && word.size() == 1) {
    // A single byte cannot merge: skip the cache.
    const Initial& init = byte_initial_[3][static_cast<unsigned char>(word[0])];
    if (init.found) {
      out.insert(out.end(), init.ids.begin(), init.ids.end());
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable && cache_.lookup(word, out)) return;
  initial_symbols(word, scratch);
  merge_all(scratch);
  auto& ids = scratch.ids;
  ids.clear();
  for (const auto& s : scratch.symbols) {
    if (s.alive) ids.push_back(s.id);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) cache_.insert(word, ids.data(), ids.size());
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  auto it = vocab_r_.find(id);
  return it == vocab_r_.end() ? nullptr : it->second;
}

}  // namespace clef::tokenizer

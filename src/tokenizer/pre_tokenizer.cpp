#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace clef::tokenizer {
namespace {

// The regex HF's ByteLevel pre-tokenizer applies when use_regex is true (GPT-2's).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

PreTokenizer::Behavior parse_behavior(const std::string& s) {
  using B = PreTokenizer::Behavior;
  if (s == "Removed") return B::kRemoved;
  if (s == "Isolated") return B::kIsolated;
  if (s == "MergedWithPrevious") return B::kMergedWithPrevious;
  if (s == "MergedWithNext") return B::kMergedWithNext;
  if (s == "Contiguous") return B::kContiguous;
  throw TokenizerError("tokenizer.json: unsupported Split behavior \"" + s + "\"");
}

bool get_bool(const nlohmann::json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean())
    throw TokenizerError(std::string("tokenizer.json: \"") + key + "\" must be a boolean");
  return j[key].get<bool>();
}

struct Piece {
  size_t begin, end;
  bool is_match;
};

}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j) {
  PreTokenizer p;
  if (!j.is_null()) p.add_step(j);
  return p;
}

void PreTokenizer::add_step(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    throw TokenizerError("tokenizer.json: pre_tokenizer must be an object with a \"type\"");
  }
  const auto type = j["type"].get<std::string>();
  if (byte_level_) {
    // Words are byte-mapped after ByteLevel; later splits would see the mapped text.
    throw TokenizerError("tokenizer.json: pre-tokenizer \"" + type +
                         "\" after ByteLevel is not supported");
  }
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      throw TokenizerError(
          "tokenizer.json: Sequence pre_tokenizer without a \"pretokenizers\" array");
    }
    for (const auto& sub : j["pretokenizers"]) add_step(sub);
  } else if (type == "Split") {
    if (!j.contains("pattern") || !j["pattern"].is_object()) {
      throw TokenizerError("tokenizer.json: Split pre_tokenizer without a pattern");
    }
    const auto& pat = j["pattern"];
    bool literal;
    std::string text;
    if (pat.contains("Regex") && pat["Regex"].is_string()) {
      literal = false;
      text = pat["Regex"].get<std::string>();
    } else if (pat.contains("String") && pat["String"].is_string()) {
      literal = true;
      text = pat["String"].get<std::string>();
    } else {
      throw TokenizerError(
          "tokenizer.json: Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
    }
    if (!j.contains("behavior") || !j["behavior"].is_string()) {
      throw TokenizerError("tokenizer.json: Split pre_tokenizer without a behavior");
    }
    steps_.push_back({Regex(text, literal), parse_behavior(j["behavior"].get<std::string>()),
                      get_bool(j, "invert", false)});
  } else if (type == "ByteLevel") {
    prefix_space_ = get_bool(j, "add_prefix_space", true);
    if (get_bool(j, "use_regex", true)) {
      (prefix_space_ ? after_prefix_ : steps_)
          .push_back({Regex(kGpt2Pattern, false), Behavior::kIsolated, false});
    }
    byte_level_ = true;
  } else if (type == "Digits") {
    // HF splits on char::is_numeric (= \p{N}): each digit alone, or runs of digits kept together.
    bool individual = get_bool(j, "individual_digits", false);
    steps_.push_back(
        {Regex("\\p{N}", false), individual ? Behavior::kIsolated : Behavior::kContiguous, false});
  } else if (type == "Punctuation") {
    // HF: char::is_ascii_punctuation or Unicode punctuation (P*).
    Behavior behavior = Behavior::kIsolated;
    if (j.contains("behavior") && j["behavior"].is_string())
      behavior = parse_behavior(j["behavior"].get<std::string>());
    steps_.push_back({Regex("[\\p{P}!-/:-@\\[-`{-~]", false), behavior, false});
  } else {
    throw TokenizerError("tokenizer.json: unsupported pre_tokenizer type \"" + type + "\"");
  }
}

void PreTokenizer::split_one(const SplitStep& step, std::string_view piece, const Range& r,
                             std::vector<Range>& out) {
  std::vector<Piece> found;
  std::string_view s = piece.substr(r.begin, r.end - r.begin);
  // Matches and the gaps between them, covering s (HF Pattern::find_matches).
  found.clear();
  size_t prev = 0;
  step.regex.for_each_match(s, [&](size_t b, size_t e) {
    if (prev != b) found.push_back({prev, b, false});
    found.push_back({b, e, true});
    prev = e;
  });
  if (prev != s.size()) found.push_back({prev, s.size(), false});
  if (step.invert) {
    for (Piece& p : found) p.is_match = !p.is_match;
  }
  // Apply the delimiter behaviour (HF NormalizedString::split); `remove` marks dropped pieces.
  std::vector<Piece> kept;  // is_match reused as "remove"
  bool previous_match = false;
  switch (step.behavior) {
    case Behavior::kIsolated:
      for (const Piece& p : found) kept.push_back({p.begin, p.end, false});
      break;
    case Behavior::kRemoved:
      kept = found;
      break;
    case Behavior::kContiguous:
      for (const Piece& p : found) {
        if (p.is_match == previous_match && !kept.empty()) {
          kept.back().end = p.end;
        } else {
          kept.push_back({p.begin, p.end, false});
        }
        previous_match = p.is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const Piece& p : found) {
        if (p.is_match && !previous_match && !kept.empty()) {
          kept.back().end = p.end;
        } else {
          kept.push_back({p.begin, p.end, false});
        }
        previous_match = p.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = found.rbegin(); it != found.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Piece& p : kept) {
    if (!p.is_match && p.end > p.begin) out.push_back({r.begin + p.begin, r.begin + p.end});
  }
}

void PreTokenizer::split(std::string_view piece, Scratch& scratch,
                         std::vector<std::string_view>& words) const {
  auto& cur = scratch.ranges;
  auto& next = scratch.next;
  cur.assign(1, Range{0, piece.size()});
  for (const SplitStep& step : steps_) {
    next.clear();
    for (const Range& r : cur) split_one(step, piece, r, next);
    cur.swap(next);
  }
  words.clear();
  if (!prefix_space_) {
    for (const Range& r : cur) {
      if (r.end > r.begin) words.push_back(piece.substr(r.begin, r.end - r.begin));
    }
    return;
  }
  // Reserve first: the views below must not be invalidated by a reallocation.
  std::string& buf = scratch.prefixed;
  buf.clear();
  buf.reserve(piece.size() + cur.size());
  for (const Range& r : cur) {
    if (r.end == r.begin) continue;
    std::string_view sub = piece.substr(r.begin, r.end - r.begin);
    size_t start = buf.size();
    if (sub[0] != ' ') buf += ' ';
    buf += sub;
    std::string_view prefixed(buf.data() + start, buf.size() - start);
    std::vector<Range> parts{{0, prefixed.size()}};
    for (const SplitStep& step : after_prefix_) {
      next.clear();
      for (const Range& pr : parts) split_one(step, prefixed, pr, next);
      parts.assign(next.begin(), next.end());
    }
    for (const Range& pr : parts) {
      if (pr.end > pr.begin) words.push_back(prefixed.substr(pr.begin, pr.end - pr.begin));
    }
  }
}

}  // namespace clef::tokenizer

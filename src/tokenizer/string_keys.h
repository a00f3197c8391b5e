// Hash and equality for std::string-keyed unordered maps that find() a std::string_view without
// building a std::string (C++20 heterogeneous lookup): the vocabulary and the word cache, per word
// on the hot path.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace clef::tokenizer {

struct StringKeyHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

struct StringKeyEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const noexcept { return a == b; }
};

}  // namespace clef::tokenizer

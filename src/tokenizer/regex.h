// PCRE2 (UTF + UCP + JIT) wrapper for the Split pre-tokenizer. HF tokenizers compiles these
// patterns with Oniguruma; translate_onig_pattern() rewrites the escapes whose meaning differs
// between the two.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace clef::tokenizer {

// Rewrites Oniguruma-only meanings into PCRE2 syntax: \s/\S as Oniguruma's Unicode space set
// (\t-\r, U+0085, Zs, Zl, Zp; PCRE2's UCP \s also takes U+180E), \h/\H as hex digits (horizontal
// space in PCRE2), \w/\W as Letter|Mark|Number|Connector_Punctuation (PCRE2: L, N and '_').
// \uHHHH (Oniguruma) becomes \x{HHHH}.
std::string translate_onig_pattern(std::string_view pattern);

class Regex {
 public:
  // literal: match the pattern text as a plain string. Throws TokenizerError when it does not
  // compile.
  Regex(std::string_view pattern, bool literal);
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Calls on_match(start, end) for each successive non-overlapping match in text (valid UTF-8),
  // empty ones included, exactly as HF's Oniguruma find_iter reports them.
  void for_each_match(std::string_view text,
                      const std::function<void(size_t, size_t)>& on_match) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace clef::tokenizer

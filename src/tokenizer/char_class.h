// Character classes with the semantics of Rust's `regex` crate (used by HF AddedVocabulary for the
// single_word / lstrip / rstrip rules): \s = White_Space, \w = Alphabetic | Mark | Nd | Pc |
// Join_Control.
#pragma once

namespace clef::tokenizer {

bool is_white_space(char32_t c);
bool is_word_char(char32_t c);

}  // namespace clef::tokenizer

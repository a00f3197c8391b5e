#include "tokenizer/regex.h"

#include <algorithm>
#include <cctype>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace clef::tokenizer {
namespace {

constexpr const char* kSpaceSet =
    "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
    "\\x{202f}\\x{205f}\\x{3000}";
constexpr const char* kWordSet = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
constexpr const char* kHexSet = "0-9a-fA-F";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string translate_onig_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      const char* set = nullptr;
      bool negate = false;
      switch (e) {
        case 's':
          set = kSpaceSet;
          break;
        case 'S':
          set = kSpaceSet;
          negate = true;
          break;
        case 'w':
          set = kWordSet;
          break;
        case 'W':
          set = kWordSet;
          negate = true;
          break;
        case 'h':
          set = kHexSet;
          break;
        case 'H':
          set = kHexSet;
          negate = true;
          break;
        default:
          break;
      }
      if (e == 'u' && i + 5 < p.size() &&
          std::all_of(p.begin() + static_cast<std::ptrdiff_t>(i) + 2,
                      p.begin() + static_cast<std::ptrdiff_t>(i) + 6,
                      [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; })) {
        // Oniguruma's \uHHHH is PCRE2's \x{HHHH}.
        out += "\\x{";
        out.append(p.substr(i + 2, 4));
        out += '}';
        i += 5;
        continue;
      }
      if (set != nullptr && !(in_class && negate)) {
        if (in_class) {
          out += set;
        } else {
          out += negate ? "[^" : "[";
          out += set;
          out += ']';
        }
      } else {
        // Negated shorthands inside a class cannot be expanded; keep PCRE2's nearly identical
        // meaning.
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' (or '^]') right after the opening bracket is a literal, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

Regex::Regex(std::string_view pattern, bool literal) : impl_(std::make_unique<Impl>()) {
  std::string translated = literal ? std::string(pattern) : translate_onig_pattern(pattern);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              options, &err, &err_off, nullptr);
  if (impl_->code == nullptr) {
    throw TokenizerError("tokenizer.json: cannot compile split pattern \"" + std::string(pattern) +
                         "\": " + pcre2_message(err) + " at offset " + std::to_string(err_off));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

void Regex::for_each_match(std::string_view text,
                           const std::function<void(size_t, size_t)>& on_match) const {
  using MatchData = std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)>;
  using Context = std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)>;
  using Stack = std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)>;
  MatchData md(pcre2_match_data_create_from_pattern(impl_->code, nullptr), &pcre2_match_data_free);
  Context ctx(nullptr, &pcre2_match_context_free);
  Stack stack(nullptr, &pcre2_jit_stack_free);
  if (!md) throw TokenizerError("out of memory for regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // The iteration of the onig crate's find_iter: an empty match right where the previous match
  // ended is skipped by stepping one character; other empty matches are reported.
  size_t pos = 0;
  size_t last_match_end = utf8::npos;
  while (pos <= text.size()) {
    int rc = impl_->jit
                 ? pcre2_jit_match(impl_->code, subject, text.size(), pos, 0, md.get(), ctx.get())
                 : pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(),
                               ctx.get());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !stack) {
      // Pathological inputs: retry with a large JIT stack (allocated only when needed).
      ctx.reset(pcre2_match_context_create(nullptr));
      stack.reset(pcre2_jit_stack_create(32 * 1024, 256 * 1024 * 1024, nullptr));
      if (!ctx || !stack) throw TokenizerError("out of memory for the regex stack");
      pcre2_jit_stack_assign(ctx.get(), nullptr, stack.get());
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) throw TokenizerError("pre-tokenizer regex failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    size_t start = ov[0], end = ov[1];
    if (end == start && last_match_end == end) {
      pos += pos < text.size() ? utf8::sequence_length(static_cast<unsigned char>(text[pos])) : 1;
      continue;
    }
    pos = end;
    last_match_end = end;
    on_match(start, end);
  }
}

}  // namespace clef::tokenizer

#include "tokenizer/normalizer.h"

#include <cstdlib>
#include <memory>

#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace clef::tokenizer {
namespace {

void collect(const nlohmann::json& j, std::vector<Normalizer::Form>& out) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    throw TokenizerError("tokenizer.json: normalizer must be an object with a \"type\"");
  }
  const auto type = j["type"].get<std::string>();
  if (type == "NFC") {
    out.push_back(Normalizer::Form::kNFC);
  } else if (type == "NFD") {
    out.push_back(Normalizer::Form::kNFD);
  } else if (type == "NFKC") {
    out.push_back(Normalizer::Form::kNFKC);
  } else if (type == "NFKD") {
    out.push_back(Normalizer::Form::kNFKD);
  } else if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) {
      throw TokenizerError("tokenizer.json: Sequence normalizer without a \"normalizers\" array");
    }
    for (const auto& sub : j["normalizers"]) collect(sub, out);
  } else {
    throw TokenizerError("tokenizer.json: unsupported normalizer type \"" + type + "\"");
  }
}

std::string normalize_segment(std::string_view seg, Normalizer::Form form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case Normalizer::Form::kNFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case Normalizer::Form::kNFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case Normalizer::Form::kNFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case Normalizer::Form::kNFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(seg.data()),
                        static_cast<utf8proc_ssize_t>(seg.size()), &out,
                        static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(out, &std::free);
  if (n < 0) {
    throw TokenizerError(std::string("normalization failed: ") + utf8proc_errmsg(n));
  }
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

// ASCII is invariant under all four forms, is a starter (blocks reordering) and never composes with
// what precedes it, so only the non-ASCII runs (with the ASCII starter just before them, which may
// compose with following marks) need utf8proc. Mostly-ASCII text thus costs one scan.
std::string apply_form(std::string_view text, Normalizer::Form form) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  const size_t n = text.size();
  while (pos < n) {
    size_t run = pos;
    while (run < n && static_cast<unsigned char>(text[run]) < 0x80) ++run;
    if (run == n) {
      out.append(text.substr(pos));
      break;
    }
    size_t seg_start = run > pos ? run - 1 : run;  // keep the preceding ASCII starter with the run
    out.append(text.substr(pos, seg_start - pos));
    size_t seg_end = run;
    while (seg_end < n && static_cast<unsigned char>(text[seg_end]) >= 0x80) ++seg_end;
    out += normalize_segment(text.substr(seg_start, seg_end - seg_start), form);
    pos = seg_end;
  }
  return out;
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& j) {
  std::vector<Form> forms;
  if (!j.is_null()) collect(j, forms);
  return Normalizer(std::move(forms));
}

std::string Normalizer::apply(std::string_view text) const {
  std::string cur(text);
  for (Form f : forms_) cur = apply_form(cur, f);
  return cur;
}

}  // namespace clef::tokenizer

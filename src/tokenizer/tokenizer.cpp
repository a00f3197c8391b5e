// The encode pipeline mirrors HF tokenizers' TokenizerImpl::encode_single_sequence:
// AddedVocabulary::extract_and_normalize (raw-text added tokens, then normalizer, then normalized
// added tokens) -> pre-tokenizer -> BPE per word. Decode mirrors TokenizerImpl::decode + the
// ByteLevel decoder.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace clef::tokenizer {

struct Tokenizer::Impl {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  AddedVocabulary added;
  enum class Decoder { kNone, kByteLevel, kUnsupported } decoder = Decoder::kNone;
  std::string decoder_name;
  ByteLevelMap byte_map;

  void encode_piece(std::string_view piece, BpeModel::Scratch& scratch,
                    PreTokenizer::Scratch& pre_scratch, std::vector<std::string_view>& words,
                    std::vector<int32_t>& out) const {
    pre_tokenizer.split(piece, pre_scratch, words);
    for (std::string_view w : words) model->tokenize(w, scratch, out);
  }
};

namespace {

bool flag(const nlohmann::json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean())
    throw TokenizerError(std::string("tokenizer.json: added token \"") + key +
                         "\" must be a boolean");
  return j[key].get<bool>();
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) p /= "tokenizer.json";
  std::ifstream in(p, std::ios::binary);
  if (!in) throw TokenizerError("cannot open tokenizer file " + p.string());
  std::string text;
  in.seekg(0, std::ios::end);
  auto size = in.tellg();
  if (size < 0) throw TokenizerError("cannot read tokenizer file " + p.string());
  text.resize(static_cast<size_t>(size));
  in.seekg(0, std::ios::beg);
  if (!in.read(text.data(), size)) throw TokenizerError("cannot read tokenizer file " + p.string());
  try {
    return from_json(text);
  } catch (const TokenizerError& e) {
    throw TokenizerError(p.string() + ": " + e.what());
  }
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json) {
  nlohmann::json j;
  // model.vocab (150k+ entries) is streamed into a flat list instead of nlohmann's std::map DOM,
  // which more than halves the load time of large tokenizer.json files.
  BpeModel::VocabEntries vocab;
  std::string path[4];        // last key seen at depths 1..3
  bool vocab_object = false;  // model.vocab is an object (a BPE vocab)
  std::optional<std::string> bad_entry;
  auto in_vocab = [&] { return vocab_object && path[1] == "model" && path[2] == "vocab"; };
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start && depth == 2 && path[1] == "model" && path[2] == "vocab") {
      vocab_object = true;
    }
    if (event == E::key && depth >= 1 && depth <= 3) {
      path[depth] = parsed.get<std::string>();
      // A discarded key still reaches the value event below, which streams the entry.
      return !(depth == 3 && in_vocab());
    }
    if (depth == 3 && in_vocab()) {
      if (event == E::value) {
        vocab.emplace_back(std::move(path[3]), std::move(parsed));
        return false;
      }
      if ((event == E::object_start || event == E::array_start) && !bad_entry) bad_entry = path[3];
    }
    return true;
  };
  try {
    j = nlohmann::json::parse(tokenizer_json.begin(), tokenizer_json.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    throw TokenizerError(std::string("tokenizer.json is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw TokenizerError("tokenizer.json: top level must be an object");
  if (bad_entry)
    throw TokenizerError("tokenizer.json: vocab id of \"" + *bad_entry + "\" is not a valid id");
  auto impl = std::make_unique<Impl>();
  try {
    // Small sections only (the model is read in place below); a missing one reads as null.
    auto get = [&](const char* key) { return j.contains(key) ? j[key] : nlohmann::json(); };
    impl->normalizer = Normalizer::from_json(get("normalizer"));
    impl->pre_tokenizer = PreTokenizer::from_json(get("pre_tokenizer"));
    if (!j.contains("model")) throw TokenizerError("tokenizer.json: no \"model\"");
    impl->model = BpeModel::from_json(j["model"], impl->pre_tokenizer.byte_level(), vocab);
    // post_processor, truncation and padding only act with add_special_tokens=True or are
    // overridden by transformers; they never change the ids of encode(text,
    // add_special_tokens=False).
    const nlohmann::json dec = get("decoder");
    if (dec.is_null()) {
      impl->decoder = Impl::Decoder::kNone;
    } else if (dec.is_object() && dec.contains("type") && dec["type"] == "ByteLevel") {
      impl->decoder = Impl::Decoder::kByteLevel;
    } else {
      // Refused at decode time only: encoding does not depend on the decoder.
      impl->decoder = Impl::Decoder::kUnsupported;
      impl->decoder_name =
          dec.is_object() && dec.contains("type") ? dec["type"].dump() : dec.dump();
    }

    std::vector<AddedToken> tokens;
    const nlohmann::json added = get("added_tokens");
    if (!added.is_null() && !added.is_array())
      throw TokenizerError("tokenizer.json: added_tokens must be an array");
    if (added.is_array()) {
      for (const auto& a : added) {
        if (!a.is_object() || !a.contains("content") || !a["content"].is_string()) {
          throw TokenizerError("tokenizer.json: each added token needs a string \"content\"");
        }
        AddedToken t;
        t.content = a["content"].get<std::string>();
        t.single_word = flag(a, "single_word", false);
        t.lstrip = flag(a, "lstrip", false);
        t.rstrip = flag(a, "rstrip", false);
        t.special = flag(a, "special", false);
        t.normalized = flag(a, "normalized", !t.special);
        tokens.push_back(std::move(t));
      }
    }
    const BpeModel& model = *impl->model;
    impl->added.add_tokens(tokens, model.vocab_entries(),
                           [&model](const std::string& c) { return model.token_to_id(c); });
    const Normalizer& norm = impl->normalizer;
    impl->added.build([&norm](const std::string& c) { return norm.apply(c); });
  } catch (const nlohmann::json::exception& e) {
    throw TokenizerError(std::string("tokenizer.json: ") + e.what());
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view utf8) const {
  if (size_t bad = utf8::find_invalid(utf8); bad != utf8::npos) {
    throw TokenizerError("input is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
  }
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  out.reserve(utf8.size() / 3 + 8);
  BpeModel::Scratch scratch;
  PreTokenizer::Scratch pre_scratch;
  std::vector<std::string_view> words;
  std::vector<AddedSplit> raw_splits, norm_splits;
  im.added.find_matches(utf8, false, raw_splits);
  for (const AddedSplit& rs : raw_splits) {
    if (rs.id >= 0) {
      out.push_back(rs.id);
      continue;
    }
    std::string_view raw = utf8.substr(rs.begin, rs.end - rs.begin);
    std::string normalized = im.normalizer.empty() ? std::string() : im.normalizer.apply(raw);
    std::string_view piece = im.normalizer.empty() ? raw : std::string_view(normalized);
    norm_splits.clear();
    im.added.find_matches(piece, true, norm_splits);
    for (const AddedSplit& ns : norm_splits) {
      if (ns.id >= 0) {
        out.push_back(ns.id);
      } else {
        im.encode_piece(piece.substr(ns.begin, ns.end - ns.begin), scratch, pre_scratch, words,
                        out);
      }
    }
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& im = *impl_;
  if (im.decoder == Impl::Decoder::kUnsupported) {
    throw TokenizerError("cannot decode: unsupported decoder " + im.decoder_name);
  }
  std::vector<const std::string*> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* tok = nullptr;
    if (const AddedToken* a = im.added.token(id)) {
      tok = &a->content;
    } else {
      tok = im.model->id_to_token(id);
    }
    // HF silently drops unknown ids; an id outside the vocabulary is a caller bug, so say so.
    if (tok == nullptr)
      throw TokenizerError("cannot decode unknown token id " + std::to_string(id));
    if (skip_special_tokens && im.added.is_special(*tok)) continue;
    tokens.push_back(tok);
  }
  if (im.decoder == Impl::Decoder::kNone) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += *tokens[i];
    }
    return out;
  }
  // ByteLevel: map each token's chars back to bytes; a token with any unmapped char keeps its own
  // bytes.
  std::string bytes;
  for (const std::string* tok : tokens) {
    size_t start = bytes.size();
    bool mapped = true;
    size_t pos = 0;
    while (pos < tok->size()) {
      size_t len = 0;
      auto b = im.byte_map.to_byte(utf8::decode(*tok, pos, len));
      if (!b) {
        mapped = false;
        break;
      }
      bytes.push_back(static_cast<char>(*b));
      pos += len;
    }
    if (!mapped) {
      bytes.resize(start);
      bytes += *tok;
    }
  }
  return utf8::lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.token_to_id(token)) return id;
  return impl_->model->token_to_id(token);
}

void Tokenizer::clear_cache() const {
  impl_->model->clear_cache();
}

size_t Tokenizer::vocab_size() const {
  return static_cast<size_t>(std::max(impl_->model->max_id(), impl_->added.max_id()) + 1);
}

}  // namespace clef::tokenizer

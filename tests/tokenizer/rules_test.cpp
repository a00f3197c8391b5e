// One test per tokenizer.json rule, on small hand-written tokenizers whose expected ids are worked
// out by hand. Byte-level vocabularies below give byte b the id b, so raw bytes read off directly.
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"

namespace {

using clef::tokenizer::Regex;
using clef::tokenizer::Tokenizer;
using clef::tokenizer::TokenizerError;
using json = nlohmann::json;
using Ids = std::vector<int32_t>;

// GPT-2 byte -> unicode char, written out independently of the implementation.
std::string byte_char(int b) {
  bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int k = 0; k < b; ++k) {
      bool p = (k >= 33 && k <= 126) || (k >= 161 && k <= 172) || (k >= 174 && k <= 255);
      if (!p) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

json byte_vocab() {
  json v = json::object();
  for (int b = 0; b < 256; ++b) v[byte_char(b)] = b;
  return v;
}

json byte_level_pre(bool with_split, const std::string& pattern = "\\s",
                    const std::string& behavior = "Isolated") {
  json bl = {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", false},
             {"use_regex", false}};
  if (!with_split) return bl;
  json split = {{"type", "Split"},
                {"pattern", {{"Regex", pattern}}},
                {"behavior", behavior},
                {"invert", false}};
  return {{"type", "Sequence"}, {"pretokenizers", json::array({split, bl})}};
}

json added(int id, const std::string& content, bool special, bool normalized,
           bool single_word = false, bool lstrip = false, bool rstrip = false) {
  return {{"id", id},          {"content", content}, {"single_word", single_word},
          {"lstrip", lstrip},  {"rstrip", rstrip},   {"normalized", normalized},
          {"special", special}};
}

// A byte-level BPE tokenizer.json: extra vocab entries get ids 256, 257, ... in order.
json byte_tokenizer(const std::vector<std::string>& extra, const json& merges,
                    const json& added_tokens = json::array(), const json& normalizer = json(),
                    const json& pre = byte_level_pre(false)) {
  json vocab = byte_vocab();
  int id = 256;
  for (const auto& e : extra) vocab[e] = id++;
  json model = {{"type", "BPE"},     {"dropout", nullptr},     {"unk_token", nullptr},
                {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
                {"merges", merges}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added_tokens},
          {"normalizer", normalizer},
          {"pre_tokenizer", pre},
          {"post_processor", nullptr},
          {"decoder",
           {{"type", "ByteLevel"},
            {"add_prefix_space", false},
            {"trim_offsets", false},
            {"use_regex", false}}},
          {"model", model}};
}

Tokenizer make(const json& j) {
  return Tokenizer::from_json(j.dump());
}

const json kNFC = {{"type", "NFC"}};

TEST(TokenizerMerges, BothFileFormatsGiveTheSameTokens) {
  Tokenizer strings = make(byte_tokenizer({"ab", "abc"}, json::array({"a b", "ab c"})));
  Tokenizer pairs = make(byte_tokenizer(
      {"ab", "abc"}, json::array({json::array({"a", "b"}), json::array({"ab", "c"})})));
  for (const Tokenizer* t : {&strings, &pairs}) {
    EXPECT_EQ(t->encode("abc"), (Ids{257}));
    EXPECT_EQ(t->encode("abd"), (Ids{256, 'd'}));
    EXPECT_EQ(t->encode("cab"), (Ids{'c', 256}));
  }
}

TEST(TokenizerMerges, EarlierMergeHasPriority) {
  // "abc": with "b c" ranked first, b+c merge before a+b can.
  EXPECT_EQ(make(byte_tokenizer({"bc", "ab"}, json::array({"b c", "a b"}))).encode("abc"),
            (Ids{'a', 256}));
  EXPECT_EQ(make(byte_tokenizer({"bc", "ab"}, json::array({"a b", "b c"}))).encode("abc"),
            (Ids{257, 'c'}));
  // Equal ranks: the leftmost pair merges first ("aaa" -> "aa" + "a").
  EXPECT_EQ(make(byte_tokenizer({"aa"}, json::array({"a a"}))).encode("aaa"), (Ids{256, 'a'}));
}

TEST(TokenizerMerges, BadMergesAreRefused) {
  EXPECT_THROW(make(byte_tokenizer({"ab"}, json::array({"a b c"}))), TokenizerError);
  EXPECT_THROW(make(byte_tokenizer({"ab"}, json::array({"ab"}))), TokenizerError);
  EXPECT_THROW(make(byte_tokenizer({}, json::array({"a b"}))),
               TokenizerError);  // "ab" not in vocab
  EXPECT_THROW(make(byte_tokenizer({"ab"}, json::array({json::array({"a", "b", "c"})}))),
               TokenizerError);
}

TEST(TokenizerAddedTokens, MatchedInRawTextBeforeTheModel) {
  json toks = json::array({added(300, "<x>", true, false)});
  Tokenizer t = make(byte_tokenizer({"ab"}, json::array({"a b"}), toks));
  // The model vocab has 257 entries ("ab" is 256), so the new token gets 257 whatever the file
  // says.
  EXPECT_EQ(t.token_to_id("<x>"), 257);
  // The token is cut out first: "a" and "b" cannot merge across it.
  EXPECT_EQ(t.encode("a<x>b"), (Ids{'a', 257, 'b'}));
  EXPECT_EQ(t.encode("ab<x>ab"), (Ids{256, 257, 256}));
  EXPECT_EQ(t.encode("<x<x>>"), (Ids{'<', 'x', 257, '>'}));
}

TEST(TokenizerAddedTokens, IdsFollowTheModelVocabLikeHF) {
  // A content already in the vocab keeps its vocab id; new ones follow the model vocab in order.
  json toks = json::array({added(257, "<x>", true, false), added(97, "a", false, false),
                           added(258, "<y>", false, false)});
  Tokenizer t = make(byte_tokenizer({"ab"}, json::array({"a b"}), toks));
  EXPECT_EQ(t.token_to_id("<x>"), 257);
  EXPECT_EQ(t.token_to_id("a"), 97);
  EXPECT_EQ(t.token_to_id("<y>"), 258);
  EXPECT_EQ(t.vocab_size(), 259u);
  // "a" is now an added token: it is cut out first, so "ab" no longer merges.
  EXPECT_EQ(t.encode("ab"), (Ids{97, 'b'}));
}

TEST(TokenizerAddedTokens, LongestThenLeftmostMatchWins) {
  json toks = json::array({added(258, "<x>", true, false), added(259, "<x>y", true, false),
                           added(260, "cd", false, false), added(261, "bcd", false, false)});
  Tokenizer t = make(byte_tokenizer({}, json::array(), toks));
  EXPECT_EQ(t.token_to_id("<x>y"), 257);
  EXPECT_EQ(t.encode("<x>y<x>"), (Ids{257, 256}));
  EXPECT_EQ(t.encode("abcd"), (Ids{'a', 259}));
}

TEST(TokenizerAddedTokens, SingleWordOnlyMatchesWholeWords) {
  json toks = json::array({added(256, "ab", false, false, /*single_word=*/true)});
  Tokenizer t = make(byte_tokenizer({}, json::array(), toks));
  EXPECT_EQ(t.encode("ab cd"), (Ids{256, ' ', 'c', 'd'}));
  EXPECT_EQ(t.encode("x ab!"), (Ids{'x', ' ', 256, '!'}));
  EXPECT_EQ(t.encode("xab"), (Ids{'x', 'a', 'b'}));
  EXPECT_EQ(t.encode("ab_"), (Ids{'a', 'b', '_'}));                // '_' is a word character
  EXPECT_EQ(t.encode("ab\xC3\xA9"), (Ids{'a', 'b', 0xC3, 0xA9}));  // so is a non-ASCII letter
}

TEST(TokenizerAddedTokens, LstripAndRstripAbsorbWhiteSpace) {
  json toks = json::array({added(256, "<l>", true, false, false, /*lstrip=*/true),
                           added(257, "<r>", true, false, false, false, /*rstrip=*/true)});
  Tokenizer t = make(byte_tokenizer({}, json::array(), toks));
  EXPECT_EQ(t.encode("a \t <l>b"), (Ids{'a', 256, 'b'}));
  EXPECT_EQ(t.encode("a <l> b"), (Ids{'a', 256, ' ', 'b'}));
  EXPECT_EQ(t.encode("a<r> \n b"), (Ids{'a', 257, 'b'}));
  EXPECT_EQ(t.encode("a <r> b"), (Ids{'a', ' ', 257, 'b'}));
}

TEST(TokenizerAddedTokens, NormalizedFlagChoosesRawOrNormalizedText) {
  const std::string composed = "\xC3\xA9";     // U+00E9
  const std::string decomposed = "e\xCC\x81";  // e + U+0301
  // normalized=true: matched after NFC, and its own content is normalized too.
  Tokenizer norm = make(
      byte_tokenizer({}, json::array(), json::array({added(256, decomposed, false, true)}), kNFC));
  EXPECT_EQ(norm.encode(decomposed), (Ids{256}));
  EXPECT_EQ(norm.encode(composed), (Ids{256}));
  // normalized=false: matched on the raw text only. (U+00E9 is itself a byte-level vocab entry, so
  // use U+01D8 = u + U+0308 + U+0301 here.)
  const std::string composed2 = "\xC7\x98";
  const std::string decomposed2 = "u\xCC\x88\xCC\x81";
  Tokenizer raw = make(
      byte_tokenizer({}, json::array(), json::array({added(256, composed2, true, false)}), kNFC));
  EXPECT_EQ(raw.encode(composed2), (Ids{256}));
  EXPECT_EQ(raw.encode(decomposed2), (Ids{0xC7, 0x98}));
  // A content that is already a vocab entry keeps the vocab id (U+00E9 is byte 0xE9's char).
  Tokenizer in_vocab =
      make(byte_tokenizer({}, json::array(), json::array({added(256, composed, true, false)})));
  EXPECT_EQ(in_vocab.token_to_id(composed), 0xE9);
}

TEST(TokenizerAddedTokens, DecodeCanSkipSpecialTokens) {
  json toks = json::array({added(256, "<s>", true, false), added(257, "<n>", false, false)});
  Tokenizer t = make(byte_tokenizer({}, json::array(), toks));
  Ids ids = t.encode("a<s>b<n>");
  EXPECT_EQ(ids, (Ids{'a', 256, 'b', 257}));
  EXPECT_EQ(t.decode(ids), "a<s>b<n>");
  EXPECT_EQ(t.decode(ids, /*skip_special_tokens=*/true), "ab<n>");
}

TEST(TokenizerNormalizer, NfcComposesWithinEachPieceOnly) {
  Tokenizer nfc =
      make(byte_tokenizer({}, json::array(), json::array({added(256, "<x>", true, false)}), kNFC));
  EXPECT_EQ(nfc.encode("e\xCC\x81"), (Ids{0xC3, 0xA9}));
  // The added token splits the text before normalization, so the mark cannot reach the "e".
  EXPECT_EQ(nfc.encode("e<x>\xCC\x81"), (Ids{'e', 256, 0xCC, 0x81}));
  Tokenizer none = make(byte_tokenizer({}, json::array()));
  EXPECT_EQ(none.encode("e\xCC\x81"), (Ids{'e', 0xCC, 0x81}));
  // NFC is canonical only: compatibility characters stay (U+FB01 LATIN SMALL LIGATURE FI).
  EXPECT_EQ(nfc.encode("\xEF\xAC\x81"), (Ids{0xEF, 0xAC, 0x81}));
  // A Sequence of supported normalizers is accepted; NFKC does fold the ligature.
  json seq = {{"type", "Sequence"}, {"normalizers", json::array({kNFC, {{"type", "NFKC"}}})}};
  EXPECT_EQ(make(byte_tokenizer({}, json::array(), json::array(), seq)).encode("\xEF\xAC\x81"),
            (Ids{'f', 'i'}));
}

TEST(TokenizerInput, InvalidUtf8IsAnError) {
  Tokenizer t = make(byte_tokenizer({}, json::array()));
  for (const char* bad : {"\xFF", "a\x80", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                          "\xE2\x82", "\xF0\x9F\x98"}) {
    EXPECT_THROW(t.encode(bad), TokenizerError) << "input bytes: " << bad;
  }
  EXPECT_EQ(t.encode("\xF0\x9F\x98\x80"), (Ids{0xF0, 0x9F, 0x98, 0x80}));
  EXPECT_EQ(t.encode(std::string("a\0b", 3)), (Ids{'a', 0, 'b'}));
}

TEST(TokenizerPreTokenizer, SplitIsolatedKeepsMatchesApart) {
  // "Ġa" (space + a) would merge if the space stayed in the same word.
  std::vector<std::string> extra = {byte_char(' ') + "a"};
  json merges = json::array({byte_char(' ') + " a"});
  EXPECT_EQ(make(byte_tokenizer(extra, merges)).encode("b a"), (Ids{'b', 256}));
  EXPECT_EQ(make(byte_tokenizer(extra, merges, json::array(), json(), byte_level_pre(true)))
                .encode("b a"),
            (Ids{'b', ' ', 'a'}));
  EXPECT_EQ(make(byte_tokenizer(extra, merges, json::array(), json(),
                                byte_level_pre(true, "\\s", "Removed")))
                .encode("b a"),
            (Ids{'b', 'a'}));
  EXPECT_EQ(
      make(byte_tokenizer(extra, merges, json::array(), json(), byte_level_pre(true, " ?\\p{L}+")))
          .encode("b a"),
      (Ids{'b', 256}));
}

TEST(TokenizerPreTokenizer, EmptyMatchesStillSplit) {
  // HF turns each empty match into a boundary: "ab" becomes "a" and "b", so "a b" cannot merge.
  Tokenizer t = make(byte_tokenizer({"ab"}, json::array({"a b"}), json::array(), json(),
                                    byte_level_pre(true, "x*")));
  EXPECT_EQ(t.encode("ab"), (Ids{'a', 'b'}));
  EXPECT_EQ(make(byte_tokenizer({"ab"}, json::array({"a b"}))).encode("ab"), (Ids{256}));
}

TEST(TokenizerPreTokenizer, DigitsAndPunctuationSplit) {
  json bl = byte_level_pre(false);
  auto with = [&](const json& step) {
    return json{{"type", "Sequence"}, {"pretokenizers", json::array({step, bl})}};
  };
  std::vector<std::string> extra = {"12", "a,"};
  json merges = json::array({"1 2", "a ,"});
  EXPECT_EQ(make(byte_tokenizer(extra, merges)).encode("x12a,"), (Ids{'x', 256, 257}));
  json digits_alone = {{"type", "Digits"}, {"individual_digits", true}};
  json digit_runs = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(
      make(byte_tokenizer(extra, merges, json::array(), json(), with(digits_alone))).encode("x12"),
      (Ids{'x', '1', '2'}));
  EXPECT_EQ(
      make(byte_tokenizer(extra, merges, json::array(), json(), with(digit_runs))).encode("x12"),
      (Ids{'x', 256}));
  json punct = {{"type", "Punctuation"}, {"behavior", "Isolated"}};
  EXPECT_EQ(make(byte_tokenizer(extra, merges, json::array(), json(), with(punct))).encode("a,"),
            (Ids{'a', ','}));
}

TEST(TokenizerPreTokenizer, ByteLevelPrefixSpaceGoesOnEachPiece) {
  std::vector<std::string> extra = {byte_char(' ') + "a"};
  json merges = json::array({byte_char(' ') + " a"});
  json bl = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}};
  auto tok = [&](const json& pre) {
    return make(byte_tokenizer(extra, merges, json::array(), json(), pre));
  };
  EXPECT_EQ(tok(bl).encode("ab"), (Ids{256, 'b'}));
  EXPECT_EQ(tok(bl).encode(" ab"), (Ids{256, 'b'}));  // already starts with a space
  // After a Split, every piece gets its own space: "a", " ", "b" -> " a", " ", " b".
  json split = {{"type", "Split"}, {"pattern", {{"Regex", "\\s"}}}, {"behavior", "Isolated"}};
  json seq = {{"type", "Sequence"}, {"pretokenizers", json::array({split, bl})}};
  EXPECT_EQ(tok(seq).encode("a b"), (Ids{256, ' ', ' ', 'b'}));
  // use_regex: the GPT-2 split runs on the prefixed text (" a" stays one word, then " a" again).
  json bl_regex = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(tok(bl_regex).encode("a a"), (Ids{256, 256}));
}

TEST(TokenizerPreTokenizer, PatternsFollowOnigurumaMeanings) {
  auto matches = [](const std::string& pattern, const std::string& text) {
    std::vector<std::pair<size_t, size_t>> out;
    Regex(pattern, false).for_each_match(text, [&](size_t b, size_t e) { out.emplace_back(b, e); });
    return out;
  };
  using M = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(matches("\\s+",
                    "a\xE1\xA0\x8E"
                    "b"),
            M{});  // U+180E is not white space
  EXPECT_EQ(matches("\\s+",
                    "a\xE3\x80\x80\xC2\x85"
                    "b"),
            (M{{1, 6}}));                               // U+3000, U+0085 are
  EXPECT_EQ(matches("\\h+", "xyzBEEF "), (M{{3, 7}}));  // \h is a hex digit
  EXPECT_EQ(matches("\\w+",
                    "\xC2\xBD"
                    "a"),
            (M{{0, 3}}));  // \w takes all numbers (U+00BD)
  EXPECT_EQ(matches("[^\\s]+", "ab cd"), (M{{0, 2}, {3, 5}}));
  EXPECT_EQ(matches("(?i:'s|'ll)", "IT'S we'LL"), (M{{2, 4}, {7, 10}}));
  EXPECT_EQ(matches("\\s+(?!\\S)", "a   b"), (M{{1, 3}}));
  EXPECT_EQ(matches("\\u0041+", "xAAy"), (M{{1, 3}}));  // Oniguruma's \uHHHH escape
  // Empty matches are reported, except one right where the previous match ended (onig find_iter).
  EXPECT_EQ(matches("x*", "ab"), (M{{0, 0}, {1, 1}, {2, 2}}));
  EXPECT_EQ(matches("a*", "aab"), (M{{0, 2}, {3, 3}}));
}

TEST(TokenizerModel, UnknownCharactersUseUnkOrByteFallback) {
  auto char_bpe = [](bool fuse, bool fallback, bool with_unk) {
    json vocab = {{"a", 0}, {"b", 1}, {"<unk>", 2}, {"ab", 3}, {"<0x63>", 4}};
    json model = {{"type", "BPE"},
                  {"vocab", vocab},
                  {"merges", json::array({"a b"})},
                  {"fuse_unk", fuse},
                  {"byte_fallback", fallback},
                  {"unk_token", with_unk ? json("<unk>") : json()}};
    return make(
        {{"model", model}});  // no normalizer, pre-tokenizer or decoder: chars are vocab entries
  };
  EXPECT_EQ(char_bpe(false, false, true).encode("abdd"), (Ids{3, 2, 2}));
  EXPECT_EQ(char_bpe(true, false, true).encode("abdd"), (Ids{3, 2}));
  EXPECT_EQ(char_bpe(false, true, true).encode("abcd"), (Ids{3, 4, 2}));
  // No unk token: unknown characters are dropped (HF), and the neighbours then merge.
  EXPECT_EQ(char_bpe(false, false, false).encode("adb"), (Ids{3}));
}

TEST(TokenizerModel, IgnoreMergesTakesWholeWordsFromTheVocab) {
  json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"abc", 3}};
  json model = {
      {"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"ignore_merges", true}};
  EXPECT_EQ(make({{"model", model}}).encode("abc"), (Ids{3}));
  model["ignore_merges"] = false;
  EXPECT_EQ(make({{"model", model}}).encode("abc"), (Ids{0, 1, 2}));
}

TEST(TokenizerLoad, UnsupportedComponentsAreRefused) {
  json base = byte_tokenizer({}, json::array());
  auto refused = [](json j) {
    try {
      Tokenizer::from_json(j.dump());
    } catch (const TokenizerError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  json j = base;
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(refused(j).find("Lowercase"), std::string::npos);
  j = base;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(refused(j).find("Whitespace"), std::string::npos);
  j = base;
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(refused(j).find("WordPiece"), std::string::npos);
  j = base;
  j["model"]["dropout"] = 0.1;
  EXPECT_NE(refused(j).find("dropout"), std::string::npos);
  j = base;
  j["pre_tokenizer"] = byte_level_pre(true, "(unclosed");
  EXPECT_NE(refused(j).find("(unclosed"), std::string::npos);
  for (const json& bad_id : {json::object(), json(1.5), json(-3), json("7")}) {
    j = base;
    j["model"]["vocab"]["bad"] = bad_id;
    EXPECT_NE(refused(j).find("\"bad\""), std::string::npos) << bad_id.dump();
  }
  j = base;
  j["model"] = {{"type", "Unigram"}, {"vocab", json::array({json::array({"a", -1.0})})}};
  EXPECT_NE(refused(j).find("Unigram"), std::string::npos);
  EXPECT_THROW(Tokenizer::from_json("{not json"), TokenizerError);
  EXPECT_THROW(Tokenizer::load("/nonexistent/tokenizer.json"), TokenizerError);
}

TEST(TokenizerDecode, ByteLevelRoundTripAndLossyBytes) {
  std::vector<std::string> extra = {byte_char(' ') + "a"};
  Tokenizer t = make(byte_tokenizer(extra, json::array({byte_char(' ') + " a"})));
  const std::string text = "x a \xC3\xA9\xF0\x9F\x91\x8D\n";
  EXPECT_EQ(t.decode(t.encode(text)), text);
  // A lone lead byte decodes to U+FFFD, like Rust's from_utf8_lossy.
  EXPECT_EQ(t.decode({'a', 0xE2, 'b'}),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_THROW(t.decode({100000}), TokenizerError);
}

const std::string kQwen3 = std::string(CLEF_SOURCE_DIR) + "/tests/golden/tokenizers/qwen3";

TEST(TokenizerQwen3, ConcurrentEncodesAgree) {
  Tokenizer t = Tokenizer::load(kQwen3);
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "Ticket " + std::to_string(i * 7919) + ": checkout fails, d\xC3\xA9j\xC3\xA0 vu. ";
  const Ids expected = t.encode(text);
  t.clear_cache();
  std::vector<Ids> results(4);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < results.size(); ++k) {
    threads.emplace_back([&, k] { results[k] = t.encode(text); });
  }
  for (auto& th : threads) th.join();
  for (const Ids& r : results) EXPECT_EQ(r, expected);
  EXPECT_EQ(t.decode(expected), text);
}

TEST(TokenizerQwen3, LongRunsStayCorrect) {
  Tokenizer t = Tokenizer::load(kQwen3);
  for (const std::string unit : {" ", "a", "\n", "7", "\xE0\xB8\x81", "\xF0\x9F\x98\x80"}) {
    std::string text;
    while (text.size() < 200000) text += unit;
    Ids ids = t.encode(text);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(t.decode(ids), text) << "unit " << unit;
  }
}

TEST(TokenizerQwen3, SpecialTokensAndLookups) {
  Tokenizer t = Tokenizer::load(kQwen3);
  EXPECT_EQ(t.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(t.token_to_id("<think>"), 151667);
  EXPECT_EQ(t.token_to_id("no such token"), std::nullopt);
  EXPECT_EQ(t.vocab_size(), 151669u);
  EXPECT_EQ(t.decode({151644, 872}, true), "user");
}

}  // namespace

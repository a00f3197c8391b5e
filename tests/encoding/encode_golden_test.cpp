// encode_request against the reference's golden encodings (tests/golden/encode-*.jsonl): every id
// and every span must match exactly, and every request the reference refused must be refused. The
// fixtures were made with the reference's silent state cut, i.e. truncation "allow".
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>

#include "encoding/encode.h"
#include "encoding/request.h"
#include "json/value.h"
#include "support/parse_json.h"
#include "tokenizer/tokenizer.h"

using clef::encoding::encode_request;
using clef::encoding::EncodeOptions;
using clef::encoding::RequestError;
using clef::encoding::Truncation;
using clef::encoding::validate_request;
using clef::json::Value;
using clef::tokenizer::Tokenizer;

namespace {

std::string golden(const std::string& rel) {
  return std::string(CLEF_SOURCE_DIR) + "/tests/golden/" + rel;
}

const Tokenizer& qwen3() {
  static const Tokenizer tok = Tokenizer::load(golden("tokenizers/qwen3/tokenizer.json"));
  return tok;
}

const Tokenizer& tiny() {
  static const Tokenizer tok = Tokenizer::load(golden("tokenizers/tiny-bpe"));
  return tok;
}

using clef::testing::parse_or_die;

// Validates + encodes one request the way the fixtures were made; returns the fixture-format JSON
// or {"error": msg}.
Value encode_like_reference(const Value& body, const Tokenizer& tok, int max_length) {
  try {
    EncodeOptions opts;
    opts.max_length = max_length;
    opts.truncation = Truncation::Allow;
    auto enc = encode_request(validate_request(body), tok, opts);
    return clef::encoding::encoded_to_json(enc);
  } catch (const RequestError& e) {
    return Value::object({{"error", Value::string(e.error.msg)}});
  }
}

struct Counts {
  int ok = 0, refused = 0;
};

Counts check_file(const std::string& file, const Tokenizer& tok, bool raw) {
  std::ifstream in(golden(file));
  EXPECT_TRUE(in.good()) << file;
  Counts counts;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++n;
    Value rec = parse_or_die(line);
    const Value& expected = *rec.find("expected");
    int max_length = 16384;
    if (const Value* m = rec.find("max_length")) max_length = static_cast<int>(*m->as_int64());
    Value got;
    if (raw) {
      // Byte for byte, as the edge fixtures require (duplicate keys, number forms, surrogates).
      clef::json::ParseError perr;
      auto body = clef::json::parse(rec.find("raw")->as_string(), &perr);
      got = body ? encode_like_reference(*body, tok, max_length)
                 : Value::object({{"error", Value::string(perr.message)}});
    } else {
      got = encode_like_reference(*rec.find("request"), tok, max_length);
    }
    if (expected.find("error")) {
      EXPECT_NE(got.find("error"), nullptr)
          << file << " line " << n << ": the reference refused this ("
          << clef::json::dumps(expected) << ") but it was accepted";
      ++counts.refused;
    } else {
      EXPECT_EQ(clef::json::dumps(got), clef::json::dumps(expected)) << file << " line " << n;
      ++counts.ok;
    }
  }
  return counts;
}

}  // namespace

TEST(EncodeGolden, Qwen3) {
  Counts c = check_file("encode-qwen3.jsonl", qwen3(), false);
  EXPECT_GT(c.ok, 50);
  EXPECT_GT(c.refused, 5);
}

TEST(EncodeGolden, Tiny) {
  Counts c = check_file("encode-tiny.jsonl", tiny(), false);
  EXPECT_GT(c.ok, 50);
}

TEST(EncodeGolden, EdgeQwen3Raw) {
  Counts c = check_file("encode-edge-qwen3.jsonl", qwen3(), true);
  EXPECT_EQ(c.ok + c.refused, 10);
  EXPECT_EQ(c.refused, 1);
}

// The model fixtures record the reference's input length per request (its silent state cut
// applied).
TEST(EncodeGolden, ModelFixturesInputTokens) {
  for (const char* model : {"tiny-r2", "tiny-r3"}) {
    const Tokenizer tok = Tokenizer::load(golden(std::string("models/") + model));
    std::ifstream in(golden(std::string("models/") + model + ".expected.jsonl"));
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      ++n;
      Value rec = parse_or_die(line);
      int max_length = 16384;
      if (const Value* m = rec.find("max_length")) max_length = static_cast<int>(*m->as_int64());
      Value got = encode_like_reference(*rec.find("request"), tok, max_length);
      ASSERT_NE(got.find("input_ids"), nullptr) << model << " line " << n;
      EXPECT_EQ(static_cast<int64_t>(got.find("input_ids")->items().size()),
                *rec.find("reference_fp32")->find("input_tokens")->as_int64())
          << model << " line " << n;
    }
    EXPECT_GE(n, 10);
  }
}

// `clefserve encode` on requests with images and videos against the reference processor
// (tests/golden/media/encode-media-tiny-r2m.jsonl, docs/spec/media.md): token ids, spans, the media
// block's token types, grids, pixel values (sha256 of their float32 bytes) and 3-D positions, field
// by field and exactly; the requests the reference refused are refused (exit 2) for the same
// reason.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include "json/value.h"
#include "support/cli_runner.h"
#include "support/parse_json.h"

using clef::json::Value;

namespace {

const std::string kRelease =
    std::string("--model ") + CLEF_SOURCE_DIR + "/tests/golden/models/tiny-r2m";

using clef::testing::parse_or_die;

std::vector<Value> cases() {
  return clef::testing::read_jsonl(std::string(CLEF_SOURCE_DIR) +
                                   "/tests/golden/media/encode-media-tiny-r2m.jsonl");
}

clef::testsupport::CliResult encode(const Value& request, const std::string& args = "") {
  return clef::testsupport::run_clefserve("encode " + kRelease + args, clef::json::dumps(request));
}

// What the reference's error says -> what ours must say (the kind, not the Python text).
const std::map<std::string, std::string> kRefusalKinds = {
    {"absolute aspect ratio must be smaller than 200", "aspect ratio must be smaller than 200"},
    {"must be larger than temporal_factor:2", "at least 2 frames"},
};

TEST(EncodeMediaGolden, EveryCaseFieldByField) {
  const std::vector<Value> all = cases();
  ASSERT_EQ(all.size(), 24u);
  int matched = 0, refused = 0;
  for (const Value& c : all) {
    SCOPED_TRACE("case " + c.find("case")->int_text() + " " + c.find("label")->as_string());
    const Value& expected = *c.find("expected");
    const clef::testsupport::CliResult r = encode(*c.find("request"));
    const Value got = parse_or_die(r.out);
    if (const Value* err = expected.find("error")) {
      EXPECT_EQ(r.status, 2) << r.out;
      ASSERT_NE(got.find("error"), nullptr) << r.out;
      bool known = false;
      for (const auto& [theirs, ours] : kRefusalKinds)
        if (err->as_string().find(theirs) != std::string::npos) {
          known = true;
          EXPECT_NE(got.find("error")->as_string().find(ours), std::string::npos) << r.out;
        }
      EXPECT_TRUE(known) << "no refusal kind for " << err->as_string();
      ++refused;
      continue;
    }
    ASSERT_EQ(r.status, 0) << r.out.substr(0, 400);
    for (const auto& [key, value] : expected.members()) {
      const Value* mine = got.find(key);
      ASSERT_NE(mine, nullptr) << key;
      if (key == "pixel_values" || key == "pixel_values_videos") {
        EXPECT_EQ(clef::json::dumps(*mine->find("shape")), clef::json::dumps(*value.find("shape")))
            << key;
        EXPECT_EQ(mine->find("sha256_f32le")->as_string(), value.find("sha256_f32le")->as_string())
            << key;
      } else {
        EXPECT_EQ(clef::json::dumps(*mine), clef::json::dumps(value)) << key;
      }
    }
    for (const auto& [key, value] : got.members())
      EXPECT_NE(expected.find(key), nullptr) << "unexpected field " << key;
    ++matched;
  }
  EXPECT_EQ(matched, 22);
  EXPECT_EQ(refused, 2);
}

// Media tokens count toward --max-length; only the state is ever cut.
TEST(EncodeMediaGolden, MediaCountTowardMaxLengthAndOnlyTheStateIsCut) {
  const Value c = cases()[0];  // one image of 70 tokens, block 73, 315 tokens in all
  const Value& expected = *c.find("expected");
  const size_t total = expected.find("input_ids")->items().size();
  ASSERT_EQ(total, 315u);
  // Cut 10 tokens of state: the block is intact, the spans move back by 10.
  const clef::testsupport::CliResult cut =
      encode(*c.find("request"), " --truncation allow --max-length " + std::to_string(total - 10));
  ASSERT_EQ(cut.status, 0) << cut.out.substr(0, 300);
  const Value got = parse_or_die(cut.out);
  EXPECT_EQ(got.find("input_ids")->items().size(), total - 10);
  EXPECT_EQ(clef::json::dumps(*got.find("mm_token_type_ids")),
            clef::json::dumps(*expected.find("mm_token_type_ids")));
  EXPECT_EQ(
      *got.find("questions")->items()[0].find("question_span")->items()[0].as_int64(),
      *expected.find("questions")->items()[0].find("question_span")->items()[0].as_int64() - 10);
  // The position of the last token: 10 fewer, as text tokens advance by one.
  const auto& pos = got.find("position_ids")->items()[0].items();
  const auto& ref = expected.find("position_ids")->items()[0].items();
  EXPECT_EQ(*pos.back().as_int64(), *ref.back().as_int64() - 10);
  // Too small for prefix + media + schema + suffix: schema_too_long naming the media.
  const clef::testsupport::CliResult small =
      encode(*c.find("request"), " --truncation allow --max-length 120");
  EXPECT_EQ(small.status, 2);
  EXPECT_NE(small.out.find("schema_too_long"), std::string::npos) << small.out;
  EXPECT_NE(small.out.find("images and videos 73"), std::string::npos) << small.out;
}

TEST(EncodeMediaGolden, RefusalsAre422WithAClearMessage) {
  const Value base = *cases()[0].find("request");
  const std::string image = base.find("images")->items()[0].as_string();
  auto with = [&](const std::string& key, const std::string& json_value) {
    Value req = base;
    req.set(key, parse_or_die(json_value));
    return encode(req);
  };
  auto expect_refusal = [](const clef::testsupport::CliResult& r, const std::string& words) {
    EXPECT_EQ(r.status, 2) << r.out.substr(0, 300);
    EXPECT_NE(r.out.find(words), std::string::npos) << r.out.substr(0, 300);
  };
  expect_refusal(with("images", R"(["https://example.com/cat.png"])"), "URLs are not supported");
  expect_refusal(with("images", R"(["file:///etc/passwd"])"), "URLs are not supported");
  expect_refusal(with("images", R"(["data:image/gif;base64,R0lGODlhAQABAAAAACw="])"),
                 "unsupported data URI");
  expect_refusal(with("images", R"(["R0lGODlhAQABAAAAACw="])"), "GIF images are not supported");
  expect_refusal(with("images", R"(["data:image/png;base64,not base64!"])"), "invalid base64");
  std::string nine = "[";
  for (int i = 0; i < 9; ++i) nine += (i ? ",\"" : "\"") + image + "\"";
  expect_refusal(with("images", nine + "]"), "too many images: 9 (limit 8");
  // A video file whose bytes are no container (AAAA = three zero bytes).
  expect_refusal(with("videos", R"([{"data":"data:video/mp4;base64,AAAA"}])"),
                 "not an MP4 or Matroska/WebM video file");
  expect_refusal(with("media_kwargs", R"({"min_pixels":4096})"), "must be given together");
  expect_refusal(with("media_kwargs", R"({"num_frames":4})"), "needs \\\"fps\\\": null");
  expect_refusal(with("media_kwargs", R"({"size":{}})"), "unsupported media_kwargs key");
  // A pad token written into the state of a media request.
  expect_refusal(with("state", R"("look <|image_pad|> here")"), "pad token");
  // A release whose vision token ids are not its tokenizer's (tiny-r2 keeps Qwen's) takes no media.
  const clef::testsupport::CliResult text_only = clef::testsupport::run_clefserve(
      std::string("encode --model ") + CLEF_SOURCE_DIR + "/tests/golden/models/tiny-r2",
      clef::json::dumps(base));
  expect_refusal(text_only, "takes no images or videos");
  // Limits from the flags.
  const clef::testsupport::CliResult over = clef::testsupport::run_clefserve(
      "encode " + kRelease + " --max-image-pixels 1000", clef::json::dumps(base));
  expect_refusal(over, "the limit is 1000 (--max-image-pixels)");
}

}  // namespace

// The float32 CPU engine on requests with images and videos vs the reference's float32 run on
// tiny-r2m (tests/golden/models/tiny-r2m.media.expected.jsonl): every case's probabilities within
// 1e-4 and logits within 1e-3. The engine's input is the reference's own encoding (token ids,
// spans, token types, 3-D positions from tests/golden/media/encode-media-tiny-r2m.jsonl) with the
// pixel values made by the media layer, checked against the fixture's sha256 first (the refused
// cases refused by the media layer); then end to end through encode_request (refused: 422).
#include <gtest/gtest.h>

#include <cmath>

#include <fstream>
#include <optional>
#include <string>

#include "answer/answer.h"
#include "engine/cpu/cpu_engine.h"
#include "engine/golden_models.h"
#include "media/image.h"
#include "media/media_config.h"
#include "media/patchify.h"
#include "media/processor.h"
#include "support/media_kwargs.h"
#include "support/media_models.h"

namespace clef {
namespace {

using json::Value;

const std::string kMedia = std::string(CLEF_SOURCE_DIR) + "/tests/golden/media/";
constexpr uint64_t kMaxPixels = 16777216;

// The request's images then videos through the media layer (throws media::MediaError).
media::VisualInput visual_input(const Value& request) {
  media::VisualInput v;
  std::vector<uint8_t> video_frames;
  if (const Value* images = request.find("images"))
    for (const Value& im : images->items()) {
      const media::ImagePlan plan =
          media::plan_image(im.as_string(), testing::image_budget(request), kMaxPixels);
      v.image_grids.push_back(plan.grid);
      media::render_image(plan, kMaxPixels, v.frames);
    }
  if (const Value* videos = request.find("videos"))
    for (const Value& vid : videos->items()) {
      std::vector<std::string> frames;
      for (const Value& f : vid.find("frames")->items()) frames.push_back(f.as_string());
      std::optional<double> fps;
      if (const Value* f = vid.find("fps")) fps = f->as_double();
      const media::VideoPlan plan = media::plan_video(frames, fps, testing::sampling(request),
                                                      media::kVideoBudget, kMaxPixels);
      v.video_grids.push_back(plan.grid);
      media::render_video(plan, kMaxPixels, video_frames);
    }
  v.frames.insert(v.frames.end(), video_frames.begin(), video_frames.end());
  return v;
}

std::vector<int32_t> ints(const Value& a) {
  std::vector<int32_t> out;
  for (const Value& x : a.items()) out.push_back(static_cast<int32_t>(*x.as_int64()));
  return out;
}

encoding::Span span(const Value& a) {
  return {static_cast<int32_t>(*a.items()[0].as_int64()),
          static_cast<int32_t>(*a.items()[1].as_int64())};
}

// The reference's encoding of a fixture case, pixel values from the media layer.
encoding::EncodedRequest fixture_encoding(const Value& request, const Value& expected) {
  encoding::EncodedRequest enc;
  enc.input_ids = ints(*expected.find("input_ids"));
  for (const Value& q : expected.find("questions")->items()) {
    encoding::EncodedQuestion eq;
    eq.id = q.find("id")->as_string();
    eq.type = static_cast<encoding::QuestionType>(*q.find("type")->as_int64());
    eq.question_span = span(*q.find("question_span"));
    for (const Value& s : q.find("option_spans")->items()) eq.option_spans.push_back(span(s));
    for (const Value& o : q.find("option_ids")->items()) eq.option_ids.push_back(o.as_string());
    enc.questions.push_back(std::move(eq));
  }
  const size_t T = enc.input_ids.size();
  const size_t offset = static_cast<size_t>(*expected.find("media_token_offset")->as_int64());
  enc.mm_token_type_ids.assign(offset, 0);
  for (int32_t t : ints(*expected.find("mm_token_type_ids")))
    enc.mm_token_type_ids.push_back(static_cast<uint8_t>(t));
  enc.mm_token_type_ids.resize(T, 0);
  for (const Value& axis : expected.find("position_ids")->items()) {
    const std::vector<int32_t> p = ints(axis);
    if (p.size() != T) throw std::runtime_error("position_ids of another length");
    enc.position_ids.insert(enc.position_ids.end(), p.begin(), p.end());
  }
  enc.visual = visual_input(request);
  return enc;
}

TEST(CpuEngineMediaGolden, TinyR2mMatchesReferenceFp32) {
  auto release = testing::load_golden_model("tiny-r2m");
  engine::cpu::CpuEngine eng(release, 2);
  const std::vector<Value> encodings = testing::read_jsonl(kMedia + "encode-media-tiny-r2m.jsonl");
  const std::vector<Value> results =
      testing::read_jsonl(testing::golden_dir() + "/tiny-r2m.media.expected.jsonl");
  ASSERT_EQ(encodings.size(), 24u);
  ASSERT_EQ(results.size(), encodings.size());
  int compared = 0, refused = 0;
  double worst_p = 0, worst_logit = 0;
  for (size_t n = 0; n < results.size(); ++n) {
    const Value& request = *encodings[n].find("request");
    const Value& expected = *encodings[n].find("expected");
    const Value& result = results[n];
    SCOPED_TRACE("case " + std::to_string(n) + " " + result.find("label")->as_string());
    ASSERT_EQ(*result.find("case")->as_int64(), *encodings[n].find("case")->as_int64());
    if (expected.find("error")) {
      ASSERT_NE(result.find("expected")->find("error"), nullptr);
      EXPECT_THROW(visual_input(request), media::MediaError);
      ++refused;
      continue;
    }
    const encoding::EncodedRequest enc = fixture_encoding(request, expected);
    // The engine's input is the reference's: check the pixel values before trusting the output.
    int64_t image_patches = 0;
    for (const auto& g : enc.visual.image_grids) image_patches += g.patches();
    const std::vector<float> rows = media::pixel_rows(enc.visual);
    const size_t split = static_cast<size_t>(image_patches) * media::kPatchValues;
    if (const Value* pv = expected.find("pixel_values")) {
      ASSERT_EQ(media::sha256_f32le(rows.data(), split), pv->find("sha256_f32le")->as_string());
    }
    if (const Value* pv = expected.find("pixel_values_videos")) {
      ASSERT_EQ(media::sha256_f32le(rows.data() + split, rows.size() - split),
                pv->find("sha256_f32le")->as_string());
    }

    const Value& ref = *result.find("reference_fp32");
    ASSERT_EQ(static_cast<int64_t>(enc.input_ids.size()), *ref.find("input_tokens")->as_int64());
    const auto outs = eng.forward({&enc});
    ASSERT_EQ(outs.size(), 1u);
    ASSERT_EQ(outs[0].logits.size(), enc.questions.size());
    for (size_t k = 0; k < enc.questions.size(); ++k) {
      const auto& q = enc.questions[k];
      const Value& ref_logits = *ref.find("logits")->find(q.id);
      const Value& ref_p = *ref.find("probabilities")->find(q.id);
      ASSERT_EQ(outs[0].logits[k].size(), ref_logits.items().size()) << q.id;
      const std::vector<float> p = answer::softmax_f32(outs[0].logits[k]);
      for (size_t j = 0; j < p.size(); ++j) {
        const double dl = std::fabs(outs[0].logits[k][j] - ref_logits.items()[j].as_double());
        const double dp = std::fabs(p[j] - ref_p.find(q.option_ids[j])->as_double());
        worst_logit = std::max(worst_logit, dl);
        worst_p = std::max(worst_p, dp);
        EXPECT_LE(dl, 1e-3) << q.id << " option " << q.option_ids[j];
        EXPECT_LE(dp, 1e-4) << q.id << " option " << q.option_ids[j];
      }
    }
    ++compared;
  }
  EXPECT_EQ(compared, 22);
  EXPECT_EQ(refused, 2);
  std::printf("tiny-r2m media: %d cases, max |dlogit| %.3g, max |dp| %.3g\n", compared, worst_logit,
              worst_p);
}

// The same cases end to end: the request through the encoder (encode_request with the release's
// vision tokens and pixel budgets), then the engine; the refused cases are refused by the
// encoder (422).
TEST(CpuEngineMediaGolden, TinyR2mEndToEndThroughTheEncoder) {
  auto release = testing::load_golden_model("tiny-r2m");
  engine::cpu::CpuEngine eng(release, 2);
  ASSERT_TRUE(eng.supports_media());
  const std::vector<Value> results =
      testing::read_jsonl(testing::golden_dir() + "/tiny-r2m.media.expected.jsonl");
  ASSERT_EQ(results.size(), 24u);
  encoding::EncodeOptions opts;
  opts.truncation = encoding::Truncation::Allow;
  opts.media = media::load_media_config(testing::golden_dir() + "/tiny-r2m");
  int compared = 0, refused = 0;
  double worst_p = 0;
  for (const Value& result : results) {
    SCOPED_TRACE(result.find("label")->as_string());
    const Value& request = *result.find("request");
    if (const Value* e = result.find("expected"); e && e->find("error")) {
      EXPECT_THROW(
          encoding::encode_request(encoding::validate_request(request), *release->tokenizer, opts),
          encoding::RequestError);
      ++refused;
      continue;
    }
    const encoding::EncodedRequest enc =
        encoding::encode_request(encoding::validate_request(request), *release->tokenizer, opts);
    ASSERT_TRUE(enc.has_media());
    const Value& ref = *result.find("reference_fp32");
    ASSERT_EQ(static_cast<int64_t>(enc.input_ids.size()), *ref.find("input_tokens")->as_int64());
    const auto outs = eng.forward({&enc});
    ASSERT_EQ(outs[0].logits.size(), enc.questions.size());
    for (size_t k = 0; k < enc.questions.size(); ++k) {
      const auto& q = enc.questions[k];
      const Value& ref_p = *ref.find("probabilities")->find(q.id);
      const std::vector<float> p = answer::softmax_f32(outs[0].logits[k]);
      ASSERT_EQ(p.size(), ref_p.members().size()) << q.id;
      for (size_t j = 0; j < p.size(); ++j) {
        const double dp = std::fabs(p[j] - ref_p.find(q.option_ids[j])->as_double());
        worst_p = std::max(worst_p, dp);
        EXPECT_LE(dp, 1e-4) << q.id << " option " << q.option_ids[j];
      }
    }
    ++compared;
  }
  EXPECT_EQ(compared, 22);
  EXPECT_EQ(refused, 2);
  std::printf("tiny-r2m media end to end: %d cases, max |dp| %.3g\n", compared, worst_p);
}

// A media request on a model without a tower, or with inputs that do not fit, is an error with a
// message, never a crash.
TEST(CpuEngineMediaGolden, RefusesMediaWithoutATowerOrWithBadInputs) {
  auto media_model = testing::load_golden_model("tiny-r2m");
  const std::vector<Value> encodings = testing::read_jsonl(kMedia + "encode-media-tiny-r2m.jsonl");
  const encoding::EncodedRequest enc =
      fixture_encoding(*encodings[0].find("request"), *encodings[0].find("expected"));

  // tiny-r2m without its vision_config: a text model (the tower's weights unused).
  auto text_model = testing::golden_without_tower("tiny-r2m");
  ASSERT_FALSE(text_model->vision.has_value());
  {
    engine::cpu::CpuEngine eng(text_model, 1);
    EXPECT_FALSE(eng.supports_media());
    try {
      eng.forward({&enc});
      ADD_FAILURE() << "a model without a tower took an image";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("no vision tower"), std::string::npos) << e.what();
    }
  }

  engine::cpu::CpuEngine eng(media_model, 1);
  encoding::EncodedRequest bad = enc;
  bad.position_ids.pop_back();
  EXPECT_THROW(eng.forward({&bad}), std::runtime_error);
  bad = enc;
  bad.mm_token_type_ids[40] = 0;  // one image pad fewer than the tower's rows
  EXPECT_THROW(eng.forward({&bad}), std::runtime_error);
  bad = enc;
  bad.visual.frames.resize(bad.visual.frames.size() - 1);
  EXPECT_THROW(eng.forward({&bad}), std::runtime_error);
}

}  // namespace
}  // namespace clef

// The CUDA engine on requests with images and videos (issues 17/18), tiny-r2m, every fixture case
// through the real encoder (encode_request with the release's media config; the encoder's
// exactness against the fixtures is tests/engine/media_golden_test.cpp's): float32 mode vs
// reference_fp32 (probabilities within 1e-4, logits within 1e-3), bf16 within 1.5x the
// reference's own bf16 noise; the GPU tower's rows vs the reference's float32 tower output
// (tiny-r2m.media-vision.safetensors) and vs the float32 CPU tower on fresh random multi-image /
// video inputs; a media request inside a batch of text requests as alone; bad inputs refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <utility>
#include <vector>

#include <unistd.h>

#include "answer/answer.h"
#include "engine/cpu/vision_tower.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/engine.h"
#include "engine/golden_models.h"
#include "media/media_config.h"
#include "media/patchify.h"
#include "model/make_model.h"
#include "model/release.h"
#include "model/safetensors.h"
#include "support/media_models.h"

namespace clef {
namespace {

using json::Value;

std::unique_ptr<engine::Engine> make(const std::string& model, engine::DType dtype) {
  engine::EngineOptions eo;
  eo.device = engine::Device::Cuda;
  eo.dtype = dtype;
  return engine::create_engine(testing::load_golden_model(model), eo);
}

engine::cuda::CudaEngine& diag(engine::Engine& e) {
  auto* c = dynamic_cast<engine::cuda::CudaEngine*>(&e);
  if (!c) throw std::runtime_error("not the CUDA engine");
  return *c;
}

struct Case {
  int n = 0;
  std::string label;
  encoding::EncodedRequest enc;
  const Value* result = nullptr;
};

// Every fixture case the encoder accepts (22 of 24), encoded as the server would.
std::vector<Case> media_cases(std::vector<Value>& results) {
  auto release = testing::load_golden_model("tiny-r2m");
  results = testing::read_jsonl(testing::golden_dir() + "/tiny-r2m.media.expected.jsonl");
  encoding::EncodeOptions opts;
  opts.truncation = encoding::Truncation::Allow;
  opts.media = media::load_media_config(testing::golden_dir() + "/tiny-r2m");
  std::vector<Case> out;
  for (const Value& r : results) {
    if (const Value* e = r.find("expected"); e && e->find("error")) continue;
    Case c;
    c.n = static_cast<int>(*r.find("case")->as_int64());
    c.label = r.find("label")->as_string();
    c.enc = encoding::encode_request(encoding::validate_request(*r.find("request")),
                                     *release->tokenizer, opts);
    c.result = &r;
    out.push_back(std::move(c));
  }
  return out;
}

struct Worst {
  double p = 0, logit = 0, ref_bf16_p = 0;
};

Worst run_cases(engine::DType dtype) {
  std::vector<Value> results;
  const std::vector<Case> cases = media_cases(results);
  EXPECT_EQ(cases.size(), 22u);
  auto eng = make("tiny-r2m", dtype);
  EXPECT_TRUE(eng->supports_media());
  Worst w;
  for (const Case& c : cases) {
    SCOPED_TRACE("case " + std::to_string(c.n) + " " + c.label);
    EXPECT_TRUE(c.enc.has_media());
    const Value& ref = *c.result->find("reference_fp32");
    const Value& ref16 = *c.result->find("reference_bf16")->find("probabilities");
    EXPECT_EQ(static_cast<int64_t>(c.enc.input_ids.size()), *ref.find("input_tokens")->as_int64());
    const auto first = eng->forward({&c.enc});
    const auto again = eng->forward({&c.enc});
    EXPECT_EQ(first[0].logits, again[0].logits) << "a repeated media request differs";
    const auto& logits = first[0].logits;
    if (logits.size() != c.enc.questions.size()) {
      ADD_FAILURE() << "question count";
      continue;
    }
    for (size_t k = 0; k < c.enc.questions.size(); ++k) {
      const auto& q = c.enc.questions[k];
      const Value& ref_logits = *ref.find("logits")->find(q.id);
      const Value& ref_p = *ref.find("probabilities")->find(q.id);
      if (logits[k].size() != ref_logits.items().size()) {
        ADD_FAILURE() << "option count of " << q.id;
        continue;
      }
      const std::vector<float> p = answer::softmax_f32(logits[k]);
      for (size_t j = 0; j < p.size(); ++j) {
        const double pref = ref_p.find(q.option_ids[j])->as_double();
        EXPECT_TRUE(std::isfinite(p[j]));
        w.p = std::max(w.p, std::fabs(p[j] - pref));
        w.logit = std::max(w.logit, std::fabs(logits[k][j] - ref_logits.items()[j].as_double()));
        // The bf16 run kept what its response shows: a noul question's p(true) only (p(false)
        // is its complement, so it deviates by as much).
        if (const Value* b = ref16.find(q.id)->find(q.option_ids[j]))
          w.ref_bf16_p = std::max(w.ref_bf16_p, std::fabs(b->as_double() - pref));
      }
    }
  }
  std::printf(
      "tiny-r2m media on CUDA %s: %zu cases, max |dp| %.3g, max |dlogit| %.3g, "
      "reference_bf16 max |dp| %.3g\n",
      dtype == engine::DType::Float32 ? "float32" : "bfloat16", cases.size(), w.p, w.logit,
      w.ref_bf16_p);
  return w;
}

TEST(CudaMediaEngine, Float32MatchesReferenceFp32) {
  CLEF_REQUIRE_GPU();
  const Worst w = run_cases(engine::DType::Float32);
  EXPECT_LE(w.p, 1e-4);
  EXPECT_LE(w.logit, 1e-3);
}

TEST(CudaMediaEngine, Bfloat16WithinReferenceBf16Noise) {
  CLEF_REQUIRE_GPU();
  const Worst w = run_cases(engine::DType::BFloat16);
  EXPECT_GT(w.ref_bf16_p, 0.0);
  EXPECT_LE(w.p, 1.5 * w.ref_bf16_p);
}

// The GPU tower's rows for the single-image cases 0-11 vs the reference's float32 tower output.
TEST(CudaMediaEngine, TowerRowsMatchReferenceFp32) {
  CLEF_REQUIRE_GPU();
  std::vector<Value> results;
  const std::vector<Case> cases = media_cases(results);
  auto expected =
      model::SafetensorsFile::open(testing::golden_dir() + "/tiny-r2m.media-vision.safetensors");
  for (engine::DType dt : {engine::DType::Float32, engine::DType::BFloat16}) {
    auto eng = make("tiny-r2m", dt);
    double worst = 0;
    int seen = 0;
    for (const Case& c : cases) {
      if (c.n > 11) continue;
      SCOPED_TRACE("case " + std::to_string(c.n));
      const model::Tensor* found = expected->find("case" + std::to_string(c.n) + "_vision_embeds");
      ASSERT_NE(found, nullptr);
      model::Tensor ref = *found;
      ref.round_to_bf16 = false;  // reference values, read as stored
      std::vector<float> rows;
      (void)diag(*eng).last_hidden_state(c.enc, &rows);
      ASSERT_EQ(rows.size(), ref.numel());
      double max_diff = 0, scale = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        max_diff = std::max(max_diff, std::fabs(rows[i] - double(ref.at(i))));
        scale = std::max(scale, std::fabs(double(ref.at(i))));
      }
      ASSERT_GT(scale, 0.0);
      worst = std::max(worst, max_diff / scale);
      // fp32: summation order only; bf16: the tower's bf16 roundings (a few ulps of 2^-8).
      EXPECT_LE(max_diff, (dt == engine::DType::Float32 ? 1e-5 : 5e-2) * scale);
      ++seen;
    }
    EXPECT_EQ(seen, 12);
    std::printf("GPU tower %s vs reference_fp32, cases 0-11: worst max|diff|/max|ref| %.3g\n",
                dt == engine::DType::Float32 ? "float32" : "bfloat16", worst);
  }
}

// A request of fresh random pixels, two images (trial 0) and a multi-group video too (trials 1, 2),
// with text around the pads.
encoding::EncodedRequest random_media_request(int trial, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  encoding::EncodedRequest enc;
  media::VisualInput& v = enc.visual;
  const std::vector<media::Grid> images = {{1, 2, 2}, {1, 6, 10}, {1, 16, 12}};
  const std::vector<media::Grid> videos = {{3, 4, 8}};
  v.image_grids = {images[trial % 3], images[(trial + 1) % 3]};
  if (trial > 0) v.video_grids = videos;
  int64_t tokens = 0;
  for (const auto* gs : {&v.image_grids, &v.video_grids})
    for (const auto& g : *gs) tokens += g.tokens();
  v.frames.resize(static_cast<size_t>(media::frames_bytes(v)));
  for (uint8_t& x : v.frames) x = static_cast<uint8_t>(byte(rng));
  // A request around the pads: text, every pad, text; positions as for text (the tower does not
  // read them).
  const int T = static_cast<int>(tokens) + 8;
  enc.input_ids.assign(T, 5);
  enc.mm_token_type_ids.assign(T, 0);
  int64_t img_tokens = 0;
  for (const auto& g : v.image_grids) img_tokens += g.tokens();
  for (int64_t i = 0; i < tokens; ++i) enc.mm_token_type_ids[4 + i] = i < img_tokens ? 1 : 2;
  for (int axis = 0; axis < 3; ++axis)
    for (int t = 0; t < T; ++t) enc.position_ids.push_back(t);
  return enc;
}

// max |gpu - cpu| and max |cpu|, the GPU tower's rows against the CPU tower's.
std::pair<double, double> max_diff_and_scale(const std::vector<float>& gpu,
                                             const std::vector<float>& cpu) {
  double d = 0, s = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    d = std::max(d, std::fabs(double(gpu[i]) - cpu[i]));
    s = std::max(s, std::fabs(double(cpu[i])));
  }
  return {d, s};
}

// One random media request (random_media_request) through the GPU tower of `eng` and the CPU
// tower: max |gpu - cpu| and max |cpu|.
std::pair<double, double> tower_error(engine::Engine& eng, const model::Release& release, int trial,
                                      std::mt19937_64& rng) {
  const encoding::EncodedRequest enc = random_media_request(trial, rng);
  std::vector<float> gpu;
  (void)diag(eng).last_hidden_state(enc, &gpu);
  const std::vector<float> cpu = engine::cpu::run_vision_tower(release, enc.visual, 2);
  EXPECT_EQ(gpu.size(), cpu.size());
  if (gpu.size() != cpu.size()) return {INFINITY, 1.0};
  return max_diff_and_scale(gpu, cpu);
}

// Fresh random pixels, several images and a multi-group video in one request: the GPU tower in
// float32 vs the CPU tower (the ground truth), segment by segment.
TEST(CudaMediaEngine, TowerMatchesCpuTowerOnRandomInputs) {
  CLEF_REQUIRE_GPU();
  auto release = testing::load_golden_model("tiny-r2m");
  auto eng = make("tiny-r2m", engine::DType::Float32);
  std::mt19937_64 rng = gputest::fresh_rng();
  for (int trial = 0; trial < 3; ++trial) {
    const auto [d, s] = tower_error(*eng, *release, trial, rng);
    EXPECT_LE(d, 1e-5 * s) << "trial " << trial;
  }
}

// The Qwen3.5 tower's head dim, 72 (tiny-r2m's is 16): a random release (make_model's tiny
// backbone, a one-block tower of 2 heads x 72), so the GPU tower runs its attention unpadded at 72
// (rope_split's 72-wide rows, the projection's K = 144) in float32 and bfloat16, against the CPU
// tower on fresh random multi-image / video requests.
TEST(CudaMediaEngine, TowerAtHeadDim72MatchesCpuTower) {
  CLEF_REQUIRE_GPU();
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("clef-tower-hd72-" + std::to_string(getpid()));
  model::MakeModelOptions mo;
  mo.out_dir = dir.string();
  mo.overwrite = true;
  mo.threads = 2;
  mo.adjust_preset = [](model::ModelPreset& p) {
    p.vision.hidden_size = 144;
    p.vision.num_heads = 2;
    p.vision.intermediate_size = 160;
  };
  model::make_model(mo);
  auto release = model::Release::load(dir.string());
  fs::remove_all(dir);  // (the release keeps its mapped files)
  ASSERT_TRUE(release->vision.has_value());
  ASSERT_EQ(release->vision->head_dim(), 72);
  std::mt19937_64 rng = gputest::fresh_rng();
  for (engine::DType dt : {engine::DType::Float32, engine::DType::BFloat16}) {
    SCOPED_TRACE(dt == engine::DType::Float32 ? "float32" : "bfloat16");
    engine::EngineOptions eo;
    eo.device = engine::Device::Cuda;
    eo.dtype = dt;
    auto eng = engine::create_engine(release, eo);
    for (int trial = 0; trial < 3; ++trial) {
      const auto [d, s] = tower_error(*eng, *release, trial, rng);
      ASSERT_GT(s, 0.0);
      // As TowerRowsMatchReferenceFp32: fp32 summation order only; bf16 the tower's roundings.
      EXPECT_LE(d, (dt == engine::DType::Float32 ? 1e-5 : 5e-2) * s) << "trial " << trial;
      std::printf("GPU tower at head dim 72, %s, trial %d: max|diff|/max|cpu| %.3g\n",
                  dt == engine::DType::Float32 ? "float32" : "bfloat16", trial, d / s);
    }
  }
}

// A media request inside a batch of text requests: its answer is the one it gets alone (it runs
// alone: bit for bit), and the text requests' stay within the packed-batch bounds.
TEST(CudaMediaEngine, MediaInsideABatchAnswersAsAlone) {
  CLEF_REQUIRE_GPU();
  std::vector<Value> results;
  const std::vector<Case> cases = media_cases(results);
  auto release = testing::load_golden_model("tiny-r2m");
  // Text requests: two fixture requests without their media.
  std::vector<encoding::EncodedRequest> texts;
  for (size_t i : {size_t{0}, size_t{5}}) {
    Value body = *cases[i].result->find("request");
    auto& members = body.members();
    members.erase(std::remove_if(members.begin(), members.end(),
                                 [](const json::Member& m) {
                                   return m.first == "images" || m.first == "videos" ||
                                          m.first == "media_kwargs";
                                 }),
                  members.end());
    encoding::EncodeOptions opts;
    opts.truncation = encoding::Truncation::Allow;
    texts.push_back(
        encoding::encode_request(encoding::validate_request(body), *release->tokenizer, opts));
    ASSERT_FALSE(texts.back().has_media());
  }
  for (engine::DType dt : {engine::DType::Float32, engine::DType::BFloat16}) {
    auto eng = make("tiny-r2m", dt);
    const encoding::EncodedRequest& m1 = cases.front().enc;
    const encoding::EncodedRequest& m2 = cases.back().enc;
    const std::vector<const encoding::EncodedRequest*> batch = {&texts[0], &m1, &texts[1], &m2};
    const auto together = eng->forward(batch);
    ASSERT_EQ(together.size(), batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto alone = eng->forward({batch[i]});
      if (batch[i]->has_media()) {
        EXPECT_EQ(together[i].logits, alone[0].logits) << "request " << i;
      } else {
        for (size_t k = 0; k < alone[0].logits.size(); ++k) {
          const auto pa = answer::softmax_f32(alone[0].logits[k]);
          const auto pt = answer::softmax_f32(together[i].logits[k]);
          for (size_t j = 0; j < pa.size(); ++j)
            EXPECT_LE(std::fabs(pa[j] - pt[j]), dt == engine::DType::Float32 ? 1e-5 : 2e-3);
        }
      }
    }
  }
}

// A model without a tower refuses media with a message; inputs that do not fit are refused before
// anything is enqueued, and the engine answers afterwards.
TEST(CudaMediaEngine, RefusesMediaWithoutATowerOrWithBadInputs) {
  CLEF_REQUIRE_GPU();
  std::vector<Value> results;
  const std::vector<Case> cases = media_cases(results);
  const encoding::EncodedRequest& enc = cases.front().enc;  // one image
  {
    // tiny-r2m without its vision_config: a text model (the tower's weights unused).
    auto text_model = testing::golden_without_tower("tiny-r2m");
    ASSERT_FALSE(text_model->vision.has_value());
    engine::EngineOptions eo;
    eo.device = engine::Device::Cuda;
    eo.dtype = engine::DType::Float32;
    auto text_only = engine::create_engine(text_model, eo);
    EXPECT_FALSE(text_only->supports_media());
    try {
      text_only->forward({&enc});
      ADD_FAILURE() << "a model without a tower took an image";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("no vision tower"), std::string::npos) << e.what();
    }
  }
  auto eng = make("tiny-r2m", engine::DType::Float32);
  ASSERT_TRUE(eng->supports_media());
  const auto good = eng->forward({&enc});
  encoding::EncodedRequest bad = enc;
  bad.position_ids.pop_back();
  EXPECT_THROW(eng->forward({&bad}), std::runtime_error);
  bad = enc;
  for (auto& t : bad.mm_token_type_ids)  // one image pad fewer than the tower's rows
    if (t == 1) {
      t = 0;
      break;
    }
  EXPECT_THROW(eng->forward({&bad}), std::runtime_error);
  bad = enc;
  bad.visual.image_grids[0].h += 1;  // an odd grid side
  EXPECT_THROW(eng->forward({&bad}), std::runtime_error);
  bad = enc;
  bad.visual.frames.resize(bad.visual.frames.size() - 1);
  EXPECT_THROW(eng->forward({&bad}), std::runtime_error);
  // A refused request inside a batch refuses the batch before anything runs; the engine still
  // answers the good request afterwards, the same as before.
  EXPECT_THROW(eng->forward({&enc, &bad}), std::runtime_error);
  EXPECT_EQ(eng->forward({&enc})[0].logits, good[0].logits);
}

}  // namespace
}  // namespace clef

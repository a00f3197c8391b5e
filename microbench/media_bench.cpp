// The host side of one 1024x1024 image request (issue 17), stage by stage, for each file format a
// client sends (PNG, JPEG, WebP: media::synthetic_image_uri): the JSON parse of the HTTP body,
// validation, base64 decode, image decode, resize, the render into the request's uint8 frame
// (decode + resize into it), and Decider::prepare as a whole (what `clefserve profile` calls
// "prepare"), on the tiny media release's tokenizer. Also timed, though no longer in prepare
// (perf-log v12a): normalise + patchify, the float32 rows that only the CPU engine and `clefserve
// encode` make on the host (the CUDA tower makes them on the device). Time is wall clock; CPU is
// the whole process's (all threads), the number to compare on a shared machine.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "encoding/request.h"
#include "json/value.h"
#include "media/geometry.h"
#include "media/image.h"
#include "media/parallel.h"
#include "media/patchify.h"
#include "media/processor.h"
#include "media/resize.h"
#include "model/release.h"
#include "service/decider.h"

namespace {

namespace media = clef::media;

constexpr int kSide = 1024;

const char* name_of(media::ImageFormat f) {
  return media::format_name(f);
}

struct Fixture {
  std::string body;       // the HTTP body
  std::string uri;        // its image string
  media::ImagePlan plan;  // parsed, probed, sized
  media::Image decoded;
};

const Fixture& fixture(media::ImageFormat f) {
  static Fixture fx[3];
  Fixture& x = fx[static_cast<int>(f)];
  if (x.body.empty()) {
    x.uri = media::synthetic_image_uri(kSide, kSide, 0, f);
    x.body = R"({"model":"tiny-r2m","state":"a short report","questions":{"decision":{"type":)"
             R"("choice","instructions":"Decide.","criteria":{"approve":"fine","reject":"not"}}},)"
             R"("images":[")" +
             x.uri + R"("]})";
    x.plan =
        media::plan_image(x.uri, media::kImageBudget, clef::encoding::Limits{}.max_image_pixels);
    x.decoded = media::decode_image(x.plan.file, clef::encoding::Limits{}.max_image_pixels);
  }
  return x;
}

const clef::service::Decider& decider() {
  static const clef::service::Decider d = [] {
    auto release = clef::model::Release::load(CLEF_SOURCE_DIR "/tests/golden/models/tiny-r2m", {});
    clef::service::DeciderOptions o;
    o.media_supported = true;
    return clef::service::Decider(release, o);
  }();
  return d;
}

void bytes_label(benchmark::State& state, const Fixture& x) {
  state.SetLabel(std::to_string(x.plan.file.bytes.size() / 1024) + " KiB file, " +
                 std::to_string(x.body.size() / 1024) + " KiB body");
}

void json_parse(benchmark::State& state, media::ImageFormat f) {
  const Fixture& x = fixture(f);
  for (auto _ : state) benchmark::DoNotOptimize(clef::json::parse(x.body, nullptr));
  bytes_label(state, x);
}

void validate(benchmark::State& state, media::ImageFormat f) {
  const auto body = clef::json::parse(fixture(f).body, nullptr);
  for (auto _ : state) benchmark::DoNotOptimize(clef::encoding::validate_request(*body));
}

void base64(benchmark::State& state, media::ImageFormat f) {
  const Fixture& x = fixture(f);
  for (auto _ : state) benchmark::DoNotOptimize(media::parse_image_string(x.uri));
}

// With the thread budget render_media gives a request's only image (a JPEG decodes in bands).
void decode(benchmark::State& state, media::ImageFormat f) {
  const Fixture& x = fixture(f);
  for (auto _ : state)
    benchmark::DoNotOptimize(media::decode_image(
        x.plan.file, clef::encoding::Limits{}.max_image_pixels, media::threads_per_item(1)));
  bytes_label(state, x);
}

// One thread (the decode before perf-log v13a): the banded decode's CPU and wall against it.
void decode_1t(benchmark::State& state, media::ImageFormat f) {
  const Fixture& x = fixture(f);
  for (auto _ : state)
    benchmark::DoNotOptimize(
        media::decode_image(x.plan.file, clef::encoding::Limits{}.max_image_pixels, 1));
  bytes_label(state, x);
}

void resize(benchmark::State& state, media::ImageFormat f) {
  const Fixture& x = fixture(f);
  for (auto _ : state)
    benchmark::DoNotOptimize(media::resize_bicubic_aa(x.decoded.rgb.data(), kSide, kSide,
                                                      x.plan.target.height, x.plan.target.width));
  state.SetLabel("to " + std::to_string(x.plan.target.width) + "x" +
                 std::to_string(x.plan.target.height));
}

// A photo-like size that smart_resize does change (1000x750 -> 992x736): what most client photos
// pay, unlike the 1024x1024 case.
void resize_photo(benchmark::State& state, media::ImageFormat) {
  const media::Image src = media::synthetic_image(1000, 750, 1);
  const media::Size target = media::smart_resize_image(750, 1000, media::kImageBudget);
  for (auto _ : state)
    benchmark::DoNotOptimize(
        media::resize_bicubic_aa(src.rgb.data(), 750, 1000, target.height, target.width));
  state.SetLabel("1000x750 to " + std::to_string(target.width) + "x" +
                 std::to_string(target.height));
}

// Decode + resize straight into a frame of the request's buffer (render_media's per-image work).
void render(benchmark::State& state, media::ImageFormat f) {
  const Fixture& x = fixture(f);
  for (auto _ : state) {
    std::vector<uint8_t> frames;
    media::render_image(x.plan, clef::encoding::Limits{}.max_image_pixels, frames,
                        media::threads_per_item(1));
    benchmark::DoNotOptimize(frames.data());
  }
}

// The host's float rows (media::patchify_into; what media::pixel_rows runs per grid).
void patchify(benchmark::State& state, media::ImageFormat f) {
  const Fixture& x = fixture(f);
  const uint8_t* p = x.decoded.rgb.data();
  for (auto _ : state) {
    std::vector<float> out;
    media::patchify({p, p}, kSide, kSide, out);
    benchmark::DoNotOptimize(out.data());
  }
}

void prepare(benchmark::State& state, media::ImageFormat f) {
  const auto body = clef::json::parse(fixture(f).body, nullptr);
  for (auto _ : state) benchmark::DoNotOptimize(decider().prepare(*body));
}

void parse_and_prepare(benchmark::State& state, media::ImageFormat f) {
  const Fixture& x = fixture(f);
  for (auto _ : state)
    benchmark::DoNotOptimize(decider().prepare(*clef::json::parse(x.body, nullptr)));
}

const int registered = [] {
  using Stage = void (*)(benchmark::State&, media::ImageFormat);
  const std::pair<const char*, Stage> stages[] = {{"json_parse", json_parse},
                                                  {"validate", validate},
                                                  {"base64", base64},
                                                  {"decode", decode},
                                                  {"decode_1t", decode_1t},
                                                  {"resize", resize},
                                                  {"resize_photo", resize_photo},
                                                  {"render", render},
                                                  {"patchify", patchify},
                                                  {"prepare", prepare},
                                                  {"parse_and_prepare", parse_and_prepare}};
  for (const auto f : {media::ImageFormat::Png, media::ImageFormat::Jpeg, media::ImageFormat::Webp})
    for (const auto& [name, fn] : stages) {
      // The photo resize does not depend on the file format: timed once.
      if (fn == resize_photo && f != media::ImageFormat::Png) continue;
      benchmark::RegisterBenchmark((std::string("media/") + name + "/" + name_of(f)).c_str(), fn, f)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MeasureProcessCPUTime()
          ->MinTime(0.3);
    }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();

// `clefserve profile` (docs/spec/benchmark.md, "The engine profile"): per input length, the median
// in-process end-to-end latency (encode + backbone + head + answer) after warm-up, the GEMM floor
// measured in the same process (CUDA engine: every backbone linear layer at that T, as the engine
// fuses them, best cuBLASLt algorithm, CUDA graph), their ratio and a per-stage breakdown.
// `--dump-hidden FILE --ids FILE` instead writes the CUDA engine's last_hidden_state (float32, [T,
// hidden]) for the HF parity check.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/profile_invariance.h"
#include "cli/synthetic_request.h"
#include "encoding/request.h"
#include "engine/engine.h"
#include "json/value.h"
#include "media/image.h"
#include "media/patchify.h"
#include "model/release.h"
#include "service/decider.h"
#ifdef CLEF_HAVE_CUDA
#include "engine/cuda/cuda_engine.h"
#endif

namespace clef::cli {
namespace {

struct ProfileArgs {
  std::string model_dir, lengths = "361,961,2761,5661";
  engine::EngineOptions engine_options{.device = engine::Device::Cuda};
  int runs = 10, warmup = 3;
  int batch = 1;  // > 1: also a packed forward of this many requests per length
  std::string json_out, dump_hidden, ids_file;
  // Media (issue 17/18): requests with this many synthetic images / videos instead of --lengths.
  int images = 0, videos = 0, video_frames = 16;
  std::string image_size = "1024x1024", video_size = "640x480";
  double video_fps = 2.0;
  bool invariance = false;  // --invariance: --lengths packed, alone vs packed
  bool pack = false;        // --pack: time the --lengths as one packed forward
  std::vector<int> layers = {1, 2, 3, 4, 8, 16, -1};  // --layers for --invariance
  std::string request_file;  // --dump-hidden with a request (JSON body) instead of --ids
  // --media "N@WxH,...,vF@WxH": several media profiles in one process (N images of WxH; one video
  // of F frames of WxH).
  std::string media_list;
  std::string media_format = "png";  // --media-format: the synthetic images' file format
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// fn() max(warmup, 1) times untimed, then max(runs, 1) times timed: the median wall time, ms.
template <typename F>
double median_run_ms(int warmup, int runs, F&& fn) {
  for (int i = 0; i < std::max(warmup, 1); ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < std::max(runs, 1); ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(ms_since(t0));
  }
  return median(t);
}

// A stage's time; "head" sums the head's sub-stages ("head", "head.gemm", ...).
double stage_ms(const std::map<std::string, double>& stages, const std::string& k) {
  double sum = 0;
  for (const auto& [name, ms] : stages)
    if (name == k || name.starts_with(k + ".")) sum += ms;
  return sum;
}

std::vector<int> parse_lengths(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      throw std::runtime_error("--lengths: not a token count: '" + item + "'");
    if (v <= 0) throw std::runtime_error("--lengths: lengths must be positive");
    out.push_back(v);
  }
  if (out.empty()) throw std::runtime_error("--lengths: empty list");
  return out;
}

std::pair<int, int> parse_size(const std::string& s, const char* flag) {
  const size_t x = s.find('x');
  int w = 0, h = 0;
  try {
    if (x != std::string::npos) w = std::stoi(s.substr(0, x)), h = std::stoi(s.substr(x + 1));
  } catch (const std::exception&) {
  }
  if (w <= 0 || h <= 0 || w > 16384 || h > 16384)
    throw std::runtime_error(std::string(flag) + ": expected WIDTHxHEIGHT, got '" + s + "'");
  return {w, h};
}

// The synthetic picture (media::synthetic_image) as a data URI of --media-format.
json::Value synthetic_image(int w, int h, int seed, const std::string& format) {
  const media::ImageFormat f = format == "jpeg"   ? media::ImageFormat::Jpeg
                               : format == "webp" ? media::ImageFormat::Webp
                                                  : media::ImageFormat::Png;
  return json::Value::string(media::synthetic_image_uri(w, h, seed, f));
}

// The profile's media request: --images pictures and --videos videos (frames form at
// --video-fps) beside a short state.
json::Value media_request(const ProfileArgs& a, const std::string& model) {
  json::Value body = make_request(model, 40);
  std::vector<json::Member> members = body.members();
  if (a.images > 0) {
    const auto [w, h] = parse_size(a.image_size, "--image-size");
    std::vector<json::Value> imgs;
    for (int i = 0; i < a.images; ++i) imgs.push_back(synthetic_image(w, h, i, a.media_format));
    members.emplace_back("images", json::Value::array(std::move(imgs)));
  }
  if (a.videos > 0) {
    const auto [w, h] = parse_size(a.video_size, "--video-size");
    std::vector<json::Value> vids;
    for (int v = 0; v < a.videos; ++v) {
      std::vector<json::Value> frames;
      for (int f = 0; f < a.video_frames; ++f)
        frames.push_back(synthetic_image(w, h, 1000 * v + f, a.media_format));
      vids.push_back(json::Value::object({{"frames", json::Value::array(std::move(frames))},
                                          {"fps", json::Value::floating(a.video_fps)}}));
    }
    members.emplace_back("videos", json::Value::array(std::move(vids)));
  }
  return json::Value::object(std::move(members));
}

#ifdef CLEF_HAVE_CUDA
void write_floats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()),
            static_cast<std::streamsize>(v.size() * sizeof(float)));
  if (!out) throw std::runtime_error("cannot write " + path);
}

// --dump-hidden FILE --request BODY.json: the request through the Decider's encoding, then FILE =
// last_hidden_state [T, hidden], FILE.vision = the tower's rows [tokens, hidden], FILE.pixels =
// pixel_values [patches, 1536] (all float32) and FILE.json = input_ids, position_ids [3][T],
// mm_token_type_ids and the grids: what the HF parity script (scripts/device/hf_parity_media.py)
// feeds transformers.
int dump_request_hidden(const ProfileArgs& a, engine::cuda::CudaEngine& c,
                        const std::shared_ptr<const model::Release>& release) {
  std::ifstream in(a.request_file);
  if (!in) throw std::runtime_error("cannot read --request file " + a.request_file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json::ParseError perr;
  const std::optional<json::Value> body = json::parse(text, &perr);
  if (!body) throw std::runtime_error("--request: not JSON: " + perr.message);
  service::DeciderOptions o;
  o.encode.truncation = encoding::Truncation::Allow;
  service::media_engines(o, {std::shared_ptr<engine::Engine>(&c, [](engine::Engine*) {})});
  const service::Decider d(release, o);
  const service::Prepared p = d.prepare(*body);
  const encoding::EncodedRequest& e = p.encoded;
  std::vector<float> rows;
  const std::vector<float> h = c.last_hidden_state(e, &rows);
  write_floats(a.dump_hidden, h);
  write_floats(a.dump_hidden + ".vision", rows);
  write_floats(a.dump_hidden + ".pixels", media::pixel_rows(e.visual));
  auto ints = [](const auto& v) {
    std::vector<json::Value> out;
    for (auto x : v) out.push_back(json::Value::integer(static_cast<int64_t>(x)));
    return json::Value::array(std::move(out));
  };
  auto grids = [](const std::vector<media::Grid>& gs) {
    std::vector<json::Value> out;
    for (const auto& g : gs)
      out.push_back(json::Value::array(
          {json::Value::integer(g.t), json::Value::integer(g.h), json::Value::integer(g.w)}));
    return json::Value::array(std::move(out));
  };
  const json::Value meta = json::Value::object({{"input_ids", ints(e.input_ids)},
                                                {"position_ids", ints(e.position_ids)},
                                                {"mm_token_type_ids", ints(e.mm_token_type_ids)},
                                                {"image_grid_thw", grids(e.visual.image_grids)},
                                                {"video_grid_thw", grids(e.visual.video_grids)}});
  std::ofstream mo(a.dump_hidden + ".json");
  mo << json::dumps(meta) << "\n";
  if (!mo) throw std::runtime_error("cannot write " + a.dump_hidden + ".json");
  std::fprintf(stderr,
               "wrote last_hidden_state [%zu, %d], vision rows [%zu], pixels, meta to %s*\n",
               e.input_ids.size(), release->text.hidden_size,
               rows.size() / std::max(1, release->text.hidden_size), a.dump_hidden.c_str());
  return 0;
}
#endif

int dump_hidden(const ProfileArgs& a, engine::Engine& eng, int hidden,
                const std::shared_ptr<const model::Release>& release) {
#ifdef CLEF_HAVE_CUDA
  auto* c = dynamic_cast<engine::cuda::CudaEngine*>(&eng);
  if (!c) throw std::runtime_error("--dump-hidden needs --device cuda");
  if (!a.request_file.empty()) return dump_request_hidden(a, *c, release);
  std::ifstream in(a.ids_file);
  if (!in) throw std::runtime_error("cannot read --ids file " + a.ids_file);
  std::vector<int32_t> ids;
  long long v;
  while (in >> v) ids.push_back(static_cast<int32_t>(v));
  const std::vector<float> h = c->last_hidden_state(ids);
  std::ofstream out(a.dump_hidden, std::ios::binary);
  out.write(reinterpret_cast<const char*>(h.data()),
            static_cast<std::streamsize>(h.size() * sizeof(float)));
  if (!out) throw std::runtime_error("cannot write " + a.dump_hidden);
  std::fprintf(stderr, "wrote last_hidden_state [%zu, %d] float32 to %s\n", ids.size(), hidden,
               a.dump_hidden.c_str());
  return 0;
#else
  (void)a, (void)eng, (void)hidden, (void)release;
  throw std::runtime_error("--dump-hidden needs a CUDA build");
#endif
}

// Median wall-clock e2e (prepare + forward + finish) of `body` after warm-up, and its parts'
// medians; tokens = its input tokens.
struct E2e {
  double total = 0, prepare = 0, forward = 0;
  int tokens = 0;
};
E2e e2e_ms(const ProfileArgs& a, const service::Decider& d, engine::Engine& eng,
           const json::Value& body) {
  std::vector<double> total, prep, fwd;
  E2e r;
  for (int i = 0; i < std::max(a.warmup, 1) + std::max(a.runs, 1); ++i) {
    const auto t0 = Clock::now();
    const service::Prepared p = d.prepare(body);
    const auto t1 = Clock::now();
    const auto outs = eng.forward({&p.encoded});
    const auto t2 = Clock::now();
    (void)d.finish(p, outs.at(0));
    r.tokens = static_cast<int>(p.encoded.input_ids.size());
    if (i < std::max(a.warmup, 1)) continue;
    total.push_back(ms_since(t0));
    prep.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    fwd.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  r.total = median(total);
  r.prepare = median(prep);
  r.forward = median(fwd);
  return r;
}

// --images / --videos: one request with that media against a text request of the same total
// token count, the tower's GEMM floor and the stages of one eager forward (issue 17's bar:
// media e2e <= 1.3 x (text e2e + the tower's GEMM floor)).
int run_media_profile(const ProfileArgs& a, const std::shared_ptr<const model::Release>& release,
                      const std::shared_ptr<engine::Engine>& eng) {
  service::DeciderOptions o;
  o.encode.truncation = encoding::Truncation::Allow;
  o.limits.max_images = std::max<size_t>(o.limits.max_images, static_cast<size_t>(a.images));
  o.limits.max_videos = std::max<size_t>(o.limits.max_videos, static_cast<size_t>(a.videos));
  service::media_engines(o, {eng});
  const service::Decider d(release, o);
  const json::Value body = media_request(a, release->name);
  const auto info = eng->info();
  std::printf(
      "clefserve profile (media): %s %s %s, device %s; %d image(s) %s, %d video(s) of %d "
      "frames %s at %.3g fps, as %s (%zu bytes of JSON)\n",
      release->name.c_str(), info.backend.c_str(), info.dtype.c_str(), info.device.c_str(),
      a.images, a.image_size.c_str(), a.videos, a.video_frames, a.video_size.c_str(), a.video_fps,
      a.media_format.c_str(), json::dumps(body).size());
  const service::Prepared p = d.prepare(body);
  const int T = static_cast<int>(p.encoded.input_ids.size());
  int64_t vision_tokens = 0, patches = 0;
  for (const auto* gs : {&p.encoded.visual.image_grids, &p.encoded.visual.video_grids})
    for (const auto& g : *gs) vision_tokens += g.tokens(), patches += g.patches();
  const E2e me = e2e_ms(a, d, *eng, body);
  const double media_e2e = me.total;
  service::DeciderOptions ot = o;
  ot.encode.max_length = T;
  const service::Decider dt(release, ot);
  const E2e te = e2e_ms(a, dt, *eng, request_of_length(dt, release->name, T));
  const double text_e2e = te.total;
  const int Tt = te.tokens;
  double floor = 0, vision_floor = 0;
  std::map<std::string, double> stages;
#ifdef CLEF_HAVE_CUDA
  if (auto* c = dynamic_cast<engine::cuda::CudaEngine*>(eng.get())) {
    stages = c->forward_profiled(p.encoded).ms;
    floor = c->gemm_floor_ms(T, std::max(a.runs, 5));
    vision_floor = c->vision_gemm_floor_ms(p.encoded.visual, std::max(a.runs, 5));
  }
#endif
  double vision = 0;
  for (const auto& [k, v] : stages)
    if (k.starts_with("vision")) vision += v;
  const double bar = text_e2e + vision_floor;
  std::printf(
      "\n| tokens (vision tokens, patches) | media e2e p50 ms | text e2e p50 ms at %d tokens | "
      "tower GEMM floor ms | tower eager ms | backbone GEMM floor ms | media / (text + "
      "tower floor) |\n|---|---:|---:|---:|---:|---:|---:|\n",
      Tt);
  std::printf("| %d (%lld, %lld) | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f |\n", T,
              static_cast<long long>(vision_tokens), static_cast<long long>(patches), media_e2e,
              text_e2e, vision_floor, vision, floor, bar > 0 ? media_e2e / bar : 0.0);
  std::printf(
      "media: prepare (validate + decode + resize + patchify) %.2f ms, forward %.2f ms; "
      "text: prepare %.2f ms, forward %.2f ms (medians)\n",
      me.prepare, me.forward, te.prepare, te.forward);
  std::printf("eager stages (ms):");
  for (const auto& [k, v] : stages) std::printf(" %s %.2f", k.c_str(), v);
  std::printf("\n");
  if (!a.json_out.empty()) {
    std::vector<json::Member> st;
    for (const auto& [k, v] : stages) st.emplace_back(k, json::Value::floating(v));
    json::Value doc =
        json::Value::object({{"model", json::Value::string(release->name)},
                             {"device", json::Value::string(info.device)},
                             {"dtype", json::Value::string(info.dtype)},
                             {"images", json::Value::integer(a.images)},
                             {"image_size", json::Value::string(a.image_size)},
                             {"media_format", json::Value::string(a.media_format)},
                             {"videos", json::Value::integer(a.videos)},
                             {"video_frames", json::Value::integer(a.video_frames)},
                             {"video_size", json::Value::string(a.video_size)},
                             {"tokens", json::Value::integer(T)},
                             {"vision_tokens", json::Value::integer(vision_tokens)},
                             {"patches", json::Value::integer(patches)},
                             {"media_e2e_p50_ms", json::Value::floating(media_e2e)},
                             {"media_prepare_p50_ms", json::Value::floating(me.prepare)},
                             {"media_forward_p50_ms", json::Value::floating(me.forward)},
                             {"text_e2e_p50_ms", json::Value::floating(text_e2e)},
                             {"text_tokens", json::Value::integer(Tt)},
                             {"tower_gemm_floor_ms", json::Value::floating(vision_floor)},
                             {"backbone_gemm_floor_ms", json::Value::floating(floor)},
                             {"stages_ms", json::Value::object(st)}});
    std::ofstream out(a.json_out);
    out << json::dumps(doc) << "\n";
  }
  return 0;
}

// --pack: the --lengths as one packed forward, as the server batches mixed requests (issue 14: a
// C16 pack of public231-shape is one long request among short ones, not N equal ones): its e2e
// (graphs, joint head), the GEMM floor at all its rows, the ratio, and the eager stages.
int run_pack_profile(const ProfileArgs& a, const std::string& name,
                     const std::shared_ptr<const model::Release>& release, engine::Engine& eng,
                     const std::vector<int>& lengths) {
  std::vector<service::Prepared> ps;
  std::vector<std::unique_ptr<service::Decider>> deciders;
  int total = 0;
  for (int L : lengths) {
    service::DeciderOptions o;
    o.encode.max_length = L;
    o.encode.truncation = encoding::Truncation::Allow;
    deciders.push_back(std::make_unique<service::Decider>(release, o));
    ps.push_back(deciders.back()->prepare(request_of_length(*deciders.back(), release->name, L)));
    total += static_cast<int>(ps.back().encoded.input_ids.size());
  }
  std::vector<const encoding::EncodedRequest*> batch;
  for (const auto& p : ps) batch.push_back(&p.encoded);
  auto once = [&] {
    const auto outs = eng.forward(batch);
    for (size_t i = 0; i < ps.size(); ++i) (void)deciders[i]->finish(ps[i], outs.at(i));
  };
  const double e2e = median_run_ms(a.warmup, a.runs, once);
  double floor = 0;
  std::map<std::string, double> stages;
#ifdef CLEF_HAVE_CUDA
  if (auto* c = dynamic_cast<engine::cuda::CudaEngine*>(&eng)) {
    floor = c->gemm_floor_ms(total, std::max(a.runs, 5));
    try {  // one pack only (forward_profiled says when the lengths make more than one)
      stages = c->forward_profiled(batch).ms;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "profile: no packed stage times: %s\n", e.what());
    }
  }
#endif
  auto stage = [&](const std::string& k) { return stage_ms(stages, k); };
  std::printf(
      "\n| pack | requests | tokens | forward e2e p50 ms | GEMM floor ms | ratio | gemm | "
      "gdn_core | attention | norms/elementwise | head |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::printf("| %s | %zu | %d | %.2f | %.2f | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
              name.c_str(), lengths.size(), total, e2e, floor, floor > 0 ? e2e / floor : 0.0,
              stage("gemm"), stage("gdn_core"), stage("attention"), stage("norms_elementwise"),
              stage("head"));
  std::printf(
      "(e2e: one engine forward of the pack, graphs, wall clock, median of %d; stages: the pack "
      "once, eagerly, with events between ops)\n",
      std::max(a.runs, 1));
  return 0;
}

int run_profile(const ProfileArgs& a) {
  model::LoadOptions lo;
  lo.progress = [](const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); };
  auto release = model::Release::load(a.model_dir, lo);
  std::shared_ptr<engine::Engine> eng = engine::create_engine(release, a.engine_options);
  if (!a.dump_hidden.empty()) return dump_hidden(a, *eng, release->text.hidden_size, release);
  if (!a.media_list.empty()) {
    std::stringstream ss(a.media_list);
    std::string item;
    while (std::getline(ss, item, ',')) {
      ProfileArgs one = a;
      const size_t at = item.find('@');
      if (at == std::string::npos || at == 0)
        throw std::runtime_error("--media: expected N@WxH or vF@WxH, got '" + item + "'");
      const bool video = item[0] == 'v';
      const int n = std::stoi(item.substr(video ? 1 : 0, at - (video ? 1 : 0)));
      if (n <= 0) throw std::runtime_error("--media: counts must be positive");
      one.images = video ? 0 : n;
      one.videos = video ? 1 : 0;
      (video ? one.video_frames : one.images) = n;
      (video ? one.video_size : one.image_size) = item.substr(at + 1);
      if (!a.json_out.empty()) one.json_out = a.json_out + "." + item;
      run_media_profile(one, release, eng);
    }
    return 0;
  }
  if (a.images > 0 || a.videos > 0) return run_media_profile(a, release, eng);
  if (a.pack) {  // one or more packs, ';'-separated
    std::stringstream ss(a.lengths);
    std::string one;
    while (std::getline(ss, one, ';')) run_pack_profile(a, one, release, *eng, parse_lengths(one));
    return 0;
  }
  const std::vector<int> lengths = parse_lengths(a.lengths);
  if (a.invariance) {
    InvarianceArgs ia{lengths, a.layers};
    return run_invariance_check(ia, release, *eng);
  }
  service::DeciderOptions dopts;
  dopts.encode.max_length = 0;
  for (int L : lengths) dopts.encode.max_length = std::max(dopts.encode.max_length, L);
  dopts.encode.truncation = encoding::Truncation::Allow;
  const auto info = eng->info();
  std::printf("clefserve profile: %s %s %s, device %s\n", release->name.c_str(),
              info.backend.c_str(), info.dtype.c_str(), info.device.c_str());
  for (const auto& [k, v] : info.kernels) std::printf("  kernels.%s: %s\n", k.c_str(), v.c_str());
  std::printf(
      "  runs %d after %d warm-up; e2e = encode + backbone + head + answer, wall clock, median\n",
      a.runs, a.warmup);

  struct Row {
    int tokens;
    double e2e, floor, host;
    std::map<std::string, double> stages;
    double stages_total;
    double backbone = 0;
    // --batch N: one forward of N requests of this length (packed on the CUDA engine)
    double batch_e2e = 0, batch_floor = 0;
    std::map<std::string, double> batch_stages{};  // the packed forward's, eager (CUDA engine)
  };
  std::vector<Row> rows;
  for (int L : lengths) {
    service::DeciderOptions o = dopts;
    o.encode.max_length = L;
    service::Decider d(release, o);
    const json::Value body = request_of_length(d, release->name, L);
    auto once = [&](double* host_ms) {
      const auto t0 = Clock::now();
      const service::Prepared p = d.prepare(body);
      const double t_enc = ms_since(t0);
      const auto outs = eng->forward({&p.encoded});
      const auto t1 = Clock::now();
      const json::Value r = d.finish(p, outs.at(0));
      if (host_ms) *host_ms = t_enc + ms_since(t1);
      return static_cast<int>(p.encoded.input_ids.size());
    };
    int T = 0;
    for (int i = 0; i < std::max(a.warmup, 1); ++i) T = once(nullptr);
    std::vector<double> e2e, host;
    for (int i = 0; i < std::max(a.runs, 1); ++i) {
      double h = 0;
      const auto t0 = Clock::now();
      once(&h);
      e2e.push_back(ms_since(t0));
      host.push_back(h);
    }
    Row row{T, median(e2e), 0.0, median(host), {}, 0.0};
#ifdef CLEF_HAVE_CUDA
    if (auto* c = dynamic_cast<engine::cuda::CudaEngine*>(eng.get())) {
      const service::Prepared p = d.prepare(body);
      const auto st = c->forward_profiled(p.encoded);
      row.stages = st.ms;
      row.stages_total = st.total_ms;
      row.floor = c->gemm_floor_ms(T, std::max(a.runs, 5));
      row.backbone = c->backbone_ms(p.encoded.input_ids, std::max(a.runs, 5));
    }
#endif
    if (a.batch > 1) {
      std::vector<service::Prepared> ps;
      for (int i = 0; i < a.batch; ++i) ps.push_back(d.prepare(body));
      std::vector<const encoding::EncodedRequest*> batch;
      for (const auto& p : ps) batch.push_back(&p.encoded);
      auto once_batch = [&] {
        const auto outs = eng->forward(batch);
        for (int i = 0; i < a.batch; ++i) (void)d.finish(ps[i], outs.at(i));
      };
      row.batch_e2e = median_run_ms(a.warmup, a.runs, once_batch);
#ifdef CLEF_HAVE_CUDA
      if (auto* c = dynamic_cast<engine::cuda::CudaEngine*>(eng.get())) {
        row.batch_floor = c->gemm_floor_ms(T * a.batch, std::max(a.runs, 5));
        try {  // one pack only (forward_profiled says when the batch is not)
          row.batch_stages = c->forward_profiled(batch).ms;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "profile: no packed stage times: %s\n", e.what());
        }
      }
#endif
    }
    rows.push_back(row);
    std::fprintf(stderr, "profile: %d tokens: e2e %.2f ms, floor %.2f ms\n", T, row.e2e, row.floor);
  }

  std::printf(
      "\n| tokens | e2e p50 ms | GEMM floor ms | ratio | gemm | gdn_core | attention | "
      "norms/elementwise | head | host (encode+answer) | eager stage sum |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  auto st = [&](const Row& r, const std::string& k) { return stage_ms(r.stages, k); };
  for (const Row& r : rows)
    std::printf("| %d | %.2f | %.2f | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                r.tokens, r.e2e, r.floor, r.floor > 0 ? r.e2e / r.floor : 0.0, st(r, "gemm"),
                st(r, "gdn_core"), st(r, "attention"), st(r, "norms_elementwise"), st(r, "head"),
                r.host, r.stages_total);
  std::printf(
      "(stage columns: device time of one eager forward with events between ops; e2e uses the CUDA "
      "graph)\n");
  for (const Row& r : rows) {
    std::string parts;
    for (const auto& [name, ms] : r.stages)
      if (name.starts_with("head")) parts += " " + name + " " + std::to_string(ms).substr(0, 5);
    if (!parts.empty())
      std::printf(
          "%d tokens: backbone graph %.2f ms (e2e - backbone - host = %.2f ms); eager head "
          "(ms):%s\n",
          r.tokens, r.backbone, r.e2e - r.backbone - r.host, parts.c_str());
  }
  if (a.batch > 1) {
    std::printf(
        "\n| batch | tokens per request | forward e2e p50 ms | per request ms | GEMM floor ms at "
        "all "
        "rows | ratio |\n|---:|---:|---:|---:|---:|---:|\n");
    for (const Row& r : rows)
      std::printf("| %d | %d | %.2f | %.2f | %.2f | %.3f |\n", a.batch, r.tokens, r.batch_e2e,
                  r.batch_e2e / a.batch, r.batch_floor,
                  r.batch_floor > 0 ? r.batch_e2e / r.batch_floor : 0.0);
    std::printf(
        "(one engine forward of the batch: packed into one backbone pass up to %d tokens)\n",
        encoding::kDefaultMaxLength);
    std::printf(
        "\n| batch x tokens | gemm | gdn_core | attention | norms/elementwise | head |\n"
        "|---:|---:|---:|---:|---:|---:|\n");
    auto bst = [&](const Row& r, const std::string& k) { return stage_ms(r.batch_stages, k); };
    for (const Row& r : rows)
      if (!r.batch_stages.empty())
        std::printf("| %d x %d | %.2f | %.2f | %.2f | %.2f | %.2f |\n", a.batch, r.tokens,
                    bst(r, "gemm"), bst(r, "gdn_core"), bst(r, "attention"),
                    bst(r, "norms_elementwise"), bst(r, "head"));
    std::printf("(the packed forward once, eagerly, with events between ops)\n");
  }
  if (!a.json_out.empty()) {
    std::vector<json::Value> items;
    for (const Row& r : rows) {
      std::vector<json::Member> stages;
      for (const auto& [k, v] : r.stages) stages.emplace_back(k, json::Value::floating(v));
      items.push_back(json::Value::object(
          {{"tokens", json::Value::integer(r.tokens)},
           {"e2e_p50_ms", json::Value::floating(r.e2e)},
           {"gemm_floor_ms", json::Value::floating(r.floor)},
           {"ratio", json::Value::floating(r.floor > 0 ? r.e2e / r.floor : 0.0)},
           {"host_ms", json::Value::floating(r.host)},
           {"backbone_graph_ms", json::Value::floating(r.backbone)},
           {"batch", json::Value::integer(a.batch)},
           {"batch_e2e_p50_ms", json::Value::floating(r.batch_e2e)},
           {"batch_gemm_floor_ms", json::Value::floating(r.batch_floor)},
           {"stages_ms", json::Value::object(stages)}}));
    }
    std::vector<json::Member> kern;
    for (const auto& [k, v] : info.kernels) kern.emplace_back(k, json::Value::string(v));
    json::Value doc = json::Value::object(
        {{"model", json::Value::string(release->name)},
         {"backend", json::Value::string(info.backend)},
         {"device", json::Value::string(info.device)},
         {"dtype", json::Value::string(info.dtype)},
         {"kernels", json::Value::object(kern)},
         {"version", json::Value::string(std::string(CLEF_VERSION) + " (" + CLEF_GIT_COMMIT + ")")},
         {"runs", json::Value::integer(a.runs)},
         {"rows", json::Value::array(items)}});
    std::ofstream out(a.json_out);
    out << json::dumps(doc) << "\n";
  }
  return 0;
}

}  // namespace

void add_profile(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ProfileArgs>();
  auto* cmd =
      app.add_subcommand("profile", "In-process latency per input length vs the GEMM floor");
  cmd->add_option("--model", args->model_dir, "release folder")->required();
  add_engine_options(cmd, args->engine_options);
  cmd->add_option("--lengths", args->lengths, "comma-separated input token counts")
      ->capture_default_str();
  cmd->add_option("--runs", args->runs, "timed runs per length")->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "untimed runs per length first")->capture_default_str();
  cmd->add_option("--batch", args->batch,
                  "also time one forward of this many requests per length (packed) against the "
                  "GEMM floor of all their rows")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--json", args->json_out, "also write the results as JSON here");
  auto* inv = cmd->add_flag(
      "--invariance", args->invariance,
      "batch invariance instead of timing: the --lengths as one packed forward, each "
      "request's logits and hidden rows (after each of --layers) alone against packed; "
      "exit 3 where any value differs");
  cmd->add_flag("--pack", args->pack,
                "time the --lengths as one packed forward (mixed lengths, as the server batches "
                "them) instead of each alone: e2e, the GEMM floor at all its rows, eager stages; "
                "several packs ';'-separated")
      ->excludes(inv);
  cmd->add_option("--layers", args->layers,
                  "decoder layer counts after which --invariance compares hidden rows (-1: all, "
                  "then the final norm)")
      ->delimiter(',')
      ->check(CLI::Range(-1, 100000))
      ->capture_default_str();
  cmd->add_option("--dump-hidden", args->dump_hidden,
                  "write last_hidden_state (float32) for --ids and exit");
  cmd->add_option("--ids", args->ids_file, "token ids (whitespace-separated) for --dump-hidden");
  cmd->add_option("--request", args->request_file,
                  "a request body (JSON, may hold images / videos) for --dump-hidden: also writes "
                  "the vision rows, pixel values and positions beside it");
  cmd->add_option("--media", args->media_list,
                  "several media profiles in one process: N@WxH (N images) or vF@WxH (one video "
                  "of F frames), comma-separated");
  cmd->add_option("--media-format", args->media_format,
                  "file format of the synthetic images and video frames: png (libpng level 1), "
                  "jpeg (quality 90, 4:2:0) or webp (lossy, quality 80); the picture is red and "
                  "green gradients, a blue x-xor-y texture and seeded noise")
      ->check(CLI::IsMember({"png", "jpeg", "webp"}))
      ->capture_default_str();
  cmd->add_option("--images", args->images,
                  "profile one request with this many synthetic images (--media-format) instead of "
                  "--lengths")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--image-size", args->image_size, "WIDTHxHEIGHT of each --images picture")
      ->capture_default_str();
  cmd->add_option("--videos", args->videos,
                  "profile one request with this many synthetic videos (frames form)")
      ->check(CLI::Range(0, 16));
  cmd->add_option("--video-frames", args->video_frames, "frames of each --videos video")
      ->check(CLI::Range(2, 768))
      ->capture_default_str();
  cmd->add_option("--video-size", args->video_size, "WIDTHxHEIGHT of each video frame")
      ->capture_default_str();
  cmd->add_option("--video-fps", args->video_fps,
                  "the videos' source frame rate (2 = every frame sampled)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->callback([args, &exit_code] {
    try {
      exit_code = run_profile(*args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "clefserve profile: %s\n", e.what());
      exit_code = 1;
    }
  });
}

}  // namespace clef::cli

// CudaEngineImpl::prepare: everything one-time before the port accepts, so no admitted request
// pays for it: the GEMM algorithm of every bucket (from the tuning cache when valid here, else
// timed), one captured and uploaded graph per bucket, and the head's scratch at the largest
// request the limits admit.
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/engine_impl.h"
#include "engine/cuda/gemm/swiglu_gemm.h"
#include "engine/prepare/token_buckets.h"
#include "media/patchify.h"
#include "model/pinning.h"

namespace clef::engine::cuda {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

// What a cached GEMM choice depends on besides its shape: device, driver, libraries, policy.
TuningKey CudaEngineImpl::tuning_key() const {
  TuningKey k = versions_;
  k["device"] = device_name_;
  k["compute_capability"] = std::to_string(cc_);
  k["sm_count"] = std::to_string(sm_count_);
  k["dtype"] = data_type_name(config_.activations);
  k["weights"] = data_type_name(config_.weights);
  k["policy"] = gemm_.policy();
  return k;
}

// One file per model geometry and dtype (entries are keyed by shape; the name keeps two models'
// caches from overwriting each other).
std::string CudaEngineImpl::tuning_file_name() const {
  std::string shape =
      std::to_string(cfg_.hidden_size) + "," + std::to_string(cfg_.intermediate_size);
  for (const LayerWeights& L : weights_.layers)
    shape += "," + std::to_string(L.in_proj.n) + ":" + std::to_string(L.out_proj.k);
  const std::string weights = config_.weights == DataType::F8_E4M3
                                  ? std::string("-") + data_type_name(config_.weights)
                                  : std::string();
  return std::string("gemm-") + data_type_name(config_.activations) + weights + "-" +
         model::sha256_hex(shape).substr(0, 16) + ".json";
}

PrepareReport CudaEngineImpl::prepare(const PrepareOptions& o) {
  require_no_flight("prepare");
  use_device();
  const auto t0 = Clock::now();
  auto say = [&](const std::string& m) {
    if (o.progress) o.progress(m);
  };
  if (o.max_tokens <= 0) throw std::runtime_error("prepare: max_tokens must be positive");
  PrepareReport rep;
  const std::vector<int> buckets = all_buckets(o.max_tokens);
  rep.buckets = static_cast<int>(buckets.size());
  rep.max_bucket = buckets.back();
  // Timing reads whatever the activations hold: finite, as reserve() zeroes every new block.
  reserve(rep.max_bucket);
  const Activations& a = workspace_->buffers();

  // 1. GEMM choices for every bucket: from the cache when it is valid here, else timed.
  const TuningKey key = tuning_key();
  rep.cache_status = "off";
  TuningCacheStatus st = TuningCacheStatus::Missing;
  if (!o.tuning_cache.empty()) {
    rep.cache_path = o.tuning_cache + "/" + tuning_file_name();
    TuningCacheLoad loaded = load_tuning_cache(rep.cache_path, key);
    st = loaded.status;
    rep.cache_status = tuning_cache_status_name(st);
    if (!loaded.detail.empty()) rep.cache_status += " (" + loaded.detail + ")";
    if (st == TuningCacheStatus::Loaded) gemm_.preload(loaded.entries);
    say("tuning cache " + rep.cache_path + ": " + rep.cache_status);
  }
  const size_t used_before = gemm_.preloaded_used();
  const size_t shapes_before = gemm_.tuned_shapes();
  for (size_t b = 0; b < buckets.size(); ++b) {
    backbone_->tune(a, buckets[b], stream_);
    if ((b + 1) % 32 == 0 || b + 1 == buckets.size())
      say("GEMM choices: " + std::to_string(b + 1) + "/" + std::to_string(buckets.size()) +
          " buckets (" + std::to_string(seconds_since(t0)) + " s)");
  }
  CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Choices loaded from the cache form no classes here; the cache's key holds the class policy
  // (Gemm::policy), so they are the invariant prepare's that wrote it.
  if (gemm_.batch_invariant() && gemm_.invariant_groups() + gemm_.variant_groups() == 0 &&
      gemm_.preloaded_used() > used_before)
    say("GEMM batch invariance: every choice from the tuning cache, which a batch-invariant "
        "prepare wrote (the class policy is in its key)");
  else if (gemm_.batch_invariant())
    say("GEMM batch invariance: " + std::to_string(gemm_.invariant_groups()) +
        " shapes choose every M's algorithm from one class of equal bits (" +
        std::to_string(gemm_.own_candidates_admitted()) +
        " of the buckets' own candidates joined it)" +
        (gemm_.variant_groups() ? ", " + std::to_string(gemm_.variant_groups()) +
                                      " keep a choice per M (not batch invariant)"
                                : ""));
  {
    int below = 0;  // the largest bucket that runs cuBLASLt + swiglu
    for (int Tp : buckets)
      if (Tp < swiglu_gemm_min_rows()) below = Tp;
    const std::string line = backbone_->check_swiglu_gemm(a, below, stream_);
    if (!line.empty()) say(line);
  }
  if (config_.weights == DataType::F8_E4M3) {
    graphs_.clear();  // graphs captured before these choices may run the other precision
    // Where tune() found FP8 slower than bf16 (the GEMM then runs the weights' bf16 copy).
    std::map<std::string, std::vector<int>> kept;
    for (int Tp : buckets)
      for (const std::string& shape : backbone_->bf16_fallbacks(Tp)) kept[shape].push_back(Tp);
    if (kept.empty()) say("FP8: every FP8 GEMM shape measured faster than bf16 at every bucket");
    for (const auto& [shape, at] : kept)
      say("FP8: GEMM " + shape + " kept in bf16 at " + std::to_string(at.size()) + " of " +
          std::to_string(buckets.size()) + " buckets (" + std::to_string(at.front()) + ".." +
          std::to_string(at.back()) + " tokens), measured faster there");
  }
  rep.gemm_shapes = static_cast<int>(gemm_.tuned_shapes());
  rep.gemm_shapes_cached = static_cast<int>(gemm_.preloaded_used() - used_before);
  const bool all_cached =
      st == TuningCacheStatus::Loaded &&
      gemm_.tuned_shapes() - shapes_before == gemm_.preloaded_used() - used_before;
  if (st == TuningCacheStatus::Loaded)
    rep.cache_status = all_cached ? "hit"
                                  : "partial (" + std::to_string(rep.gemm_shapes_cached) + " of " +
                                        std::to_string(rep.gemm_shapes) + ")";
  if (!o.tuning_cache.empty() && !all_cached) {
    try {
      save_tuning_cache(rep.cache_path, key, gemm_.entries());
      say("tuning cache written: " + rep.cache_path);
    } catch (const std::exception& e) {
      say(std::string("tuning cache not written: ") + e.what());  // serving does not need it
    }
  }
  rep.tuning_s = seconds_since(t0);

  // 2. One eager forward (every kernel loaded and configured), then every bucket's graph.
  const auto t1 = Clock::now();
  backbone_->enqueue(a, buckets.front(), stream_);
  CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Packed forwards: per bucket, every sequence bucket whose smallest packing (S/2 + 1 sequences
  // of kMinPackedRows rows) fits it; rarer packings are captured when first seen. Packs of the
  // buckets that run at their exact rows (pack_rows) need none.
  std::vector<GraphKey> keys;
  for (int Tp : buckets) {
    keys.push_back({Tp, 1, config_.weights});
    if (eager_rows(Tp)) continue;
    for (int S = 2; S <= kMaxPackedSequences && (S / 2 + 1) * kMinPackedRows <= Tp; S *= 2)
      keys.push_back({Tp, S, config_.weights});
  }
  graphs_.set_limit(std::max(kGraphsWithoutPrepare, keys.size() + kGraphsWithoutPrepare / 4));
  for (const GraphKey& gk : keys) {
    if (graphs_.find(gk)) continue;
    if (gk.sequences == 1) {
      graphs_.capture(gk, stream_, [&] { backbone_->enqueue(a, gk.tokens, stream_); });
    } else {
      const PackView v = pack_view(gk.tokens, gk.sequences);
      graphs_.capture(gk, stream_, [&] { backbone_->enqueue(a, gk.tokens, stream_, nullptr, &v); });
    }
  }
  CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  pack_tokens_ = rep.max_bucket;
  rep.graphs = static_cast<int>(keys.size());
  rep.graphs_s = seconds_since(t1);
  say("graphs: " + std::to_string(keys.size()) + " (" + std::to_string(buckets.size()) +
      " buckets up to " + std::to_string(rep.max_bucket) + " tokens x sequence buckets up to " +
      std::to_string(kMaxPackedSequences) + ", " + std::to_string(rep.graphs_s) + " s)");

  // 3. The head at the largest request the limits admit: its scratch never grows later.
  const auto t2 = Clock::now();
  warm_head(rep.max_bucket, o.max_questions, o.max_options);
  // Batch staging for batches of up to max_tokens tokens (the queue's default budget): the head's
  // tables and logits, and the packs' ids and tables (at most two packs' worth of rows).
  head_->reserve_batch(static_cast<size_t>(rep.max_bucket), o.max_questions, o.max_options,
                       kMaxPackedSequences);
  {
    const size_t ints =
        2 * (static_cast<size_t>(rep.max_bucket) +
             pack_table_ints(rep.max_bucket, kMaxPackedSequences, rows_per_tile(rep.max_bucket)));
    if (ints * sizeof(int32_t) > ids_pinned_.bytes()) ids_pinned_.resize(ints * sizeof(int32_t));
  }
  rep.head_s = seconds_since(t2);
  // 4. The vision tower once on a small image and a 2-group video (every tower kernel loaded, the
  // media tables staged) and one media forward of the backbone, so the first media request pays
  // only what depends on its size (its GEMM plans, a larger workspace).
  if (vision_) warm_media();
  rep.total_s = seconds_since(t0);
  return rep;
}

void CudaEngineImpl::warm_media() {
  encoding::EncodedRequest enc;
  enc.visual.image_grids.push_back({1, 2, 2});
  enc.visual.video_grids.push_back({2, 2, 2});
  enc.visual.frames.assign(static_cast<size_t>(media::frames_bytes(enc.visual)), 0);
  const int T = 16;
  enc.input_ids.assign(T, 0);
  enc.mm_token_type_ids.assign(T, 0);
  enc.mm_token_type_ids[4] = 1;  // the image's one merged row, then the video's two
  enc.mm_token_type_ids[6] = 2;
  enc.mm_token_type_ids[7] = 2;
  for (int axis = 0; axis < 3; ++axis)
    for (int t = 0; t < T; ++t) enc.position_ids.push_back(t);
  run_media(enc, nullptr);
  CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// One head run at T rows with max_questions questions and max_options options (one-token spans,
// reused round-robin): sizes every head scratch and staging buffer for any admitted request.
void CudaEngineImpl::warm_head(int T, int max_questions, int max_options) {
  encoding::EncodedRequest enc;
  enc.input_ids.resize(T);
  for (int i = 0; i < T; ++i) enc.input_ids[i] = i % cfg_.vocab_size;
  const int nq = std::max(1, max_questions);
  const int per_q = std::max(2, max_options / nq);
  int pos = 0;
  auto span = [&] {
    encoding::Span sp{pos % T, pos % T + 1};
    ++pos;
    return sp;
  };
  for (int k = 0; k < nq; ++k) {
    encoding::EncodedQuestion q;
    q.id = "q" + std::to_string(k);
    q.type = static_cast<encoding::QuestionType>(k % 3);
    q.question_span = span();
    for (int j = 0; j < per_q; ++j) {
      q.option_spans.push_back(span());
      q.option_ids.push_back(std::to_string(j));
    }
    enc.questions.push_back(std::move(q));
  }
  const Activations& a = workspace_->buffers();
  CLEF_CUDA_CHECK(cudaMemsetAsync(
      a.final_hidden, 0,
      static_cast<size_t>(T) * cfg_.hidden_size * data_type_bytes(config_.activations), stream_));
  (void)run_head(enc);
}

}  // namespace clef::engine::cuda

// The CUDA engine (issue 6): weights uploaded once (bf16, or fp32 in parity mode) with horizontally
// fused projections, the backbone as cuBLASLt GEMMs + the kernels of kernels.h / gdn_chunked.h /
// attention_core.h, one CUDA graph per padded token bucket (engine/prepare/token_buckets.h; right
// padding is exact: every op is causal), then the joint head on the real length. prepare() does all
// of the one-time work (GEMM choices, graphs, head scratch) for every admitted length before
// serving.
#include "engine/cuda/cuda_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <list>
#include <stdexcept>

#include "engine/cuda/attention/attention_core.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/gdn/tensor_core.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/head.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/attn_prep.h"
#include "engine/cuda/kernels/elementwise.h"
#include "engine/cuda/kernels/gdn_prep.h"
#include "engine/cuda/kernels/norm.h"
#include "engine/cuda/versions.h"
#include "engine/prepare/token_buckets.h"
#include "engine/prepare/tuning_cache.h"
#include "model/bf16.h"
#include "model/pinning.h"

namespace clef::engine::cuda {
namespace {

using bf16 = __nv_bfloat16;
// Graphs kept without prepare() (CLI, tests): every bucket up to ~90k tokens, so a cyclic mix of
// lengths never thrashes. prepare() keeps every bucket it captured, whatever their number.
constexpr size_t kMaxGraphs = 256;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

template <typename E>
E to_e(float f);
template <>
float to_e<float>(float f) {
  return f;
}
template <>
bf16 to_e<bf16>(float f) {
  __nv_bfloat16_raw r;
  r.x = model::float_to_bf16(f);
  return bf16(r);
}

// Appends tensor t (as the engine must use it: bf16-rounded per the loading rule) converted to E.
template <typename E>
void append(std::vector<E>& dst, const model::Tensor& t) {
  const size_t n = t.numel(), off = dst.size();
  dst.resize(off + n);
  if constexpr (std::is_same_v<E, bf16>) {
    if (t.dtype == model::DType::BF16) {
      std::memcpy(static_cast<void*>(dst.data() + off), t.data, n * 2);
      return;
    }
  }
  std::vector<float> tmp(std::min<size_t>(n, 1 << 22));
  for (size_t i = 0; i < n; i += tmp.size()) {
    const size_t m = std::min(tmp.size(), n - i);
    t.to_float(tmp.data(), i, m);
    for (size_t j = 0; j < m; ++j) dst[off + i + j] = to_e<E>(tmp[j]);
  }
}

template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 1));
  CLEF_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

struct Layer {
  bool linear = true;
  DeviceBuffer in_norm, post_norm;  // float [D]
  DeviceBuffer w_in;                // GDN [qkv|z|b|a] or attention [q/gate|k|v], E [N_in, D]
  int n_in = 0;
  DeviceBuffer conv_w, A_log, dt_bias, gnorm_w;  // GDN
  DeviceBuffer q_norm, k_norm;                   // attention
  DeviceBuffer w_out;                            // out_proj / o_proj E [D, *]
  int k_out = 0;
  DeviceBuffer w_gu, w_down;  // MLP
};

// Events between the ops of one eager forward, each interval labelled with the op that ended it.
class StageRecorder {
 public:
  explicit StageRecorder(cudaStream_t s) : s_(s) {}
  ~StageRecorder() {
    for (auto& e : events_) cudaEventDestroy(e.first);
  }
  void mark(const char* label) {
    cudaEvent_t e;
    CLEF_CUDA_CHECK(cudaEventCreate(&e));
    CLEF_CUDA_CHECK(cudaEventRecord(e, s_));
    events_.emplace_back(e, label);
  }
  StageTimes collect() {
    StageTimes st;
    CLEF_CUDA_CHECK(cudaStreamSynchronize(s_));
    for (size_t i = 1; i < events_.size(); ++i) {
      float ms = 0;
      CLEF_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i - 1].first, events_[i].first));
      st.ms[events_[i].second] += ms;
      st.total_ms += ms;
    }
    return st;
  }

 private:
  cudaStream_t s_;
  std::vector<std::pair<cudaEvent_t, std::string>> events_;
};

// Median device time (ms) of `enqueue` on stream s over `runs` repetitions, timed with events.
template <typename F>
double median_ms(cudaStream_t s, int runs, F&& enqueue) {
  cudaEvent_t e0, e1;
  CLEF_CUDA_CHECK(cudaEventCreate(&e0));
  CLEF_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> t;
  try {
    for (int i = 0; i < std::max(runs, 1); ++i) {
      CLEF_CUDA_CHECK(cudaEventRecord(e0, s));
      enqueue();
      CLEF_CUDA_CHECK(cudaEventRecord(e1, s));
      CLEF_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CLEF_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms);
    }
  } catch (...) {
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    throw;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <typename E>
class Impl final : public CudaEngine {
 public:
  Impl(std::shared_ptr<const model::Release> rel, const EngineOptions& opts)
      : rel_(std::move(rel)), cfg_(rel_->text), gemm_(std::is_same_v<E, float>) {
    int dev = 0;
    CLEF_CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    CLEF_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    cc_ = prop.major * 10 + prop.minor;
    device_ = std::string(prop.name) + ", sm_" + std::to_string(cc_);
    if (opts.kernels != "auto" && opts.kernels != "generic" && opts.kernels != "hopper")
      throw std::runtime_error("--kernels must be auto, generic or hopper (got '" + opts.kernels +
                               "')");
    if (opts.kernels == "hopper" && cc_ < 90)
      throw std::runtime_error("--kernels hopper needs compute capability 9.0, this device is " +
                               device_);
    kernels_mode_ = opts.kernels;
    validate_config();
    CLEF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    upload_weights();
    head_ = std::make_unique<CudaJointHead>(
        *rel_, std::is_same_v<E, float> ? HeadPrecision::Float32 : HeadPrecision::BFloat16, nullptr,
        [](const std::string& m) { std::fprintf(stderr, "cuda: head: %s\n", m.c_str()); });
  }

  ~Impl() override {
    clear_graphs();
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::vector<ForwardOutput> forward(
      const std::vector<const encoding::EncodedRequest*>& batch) override {
    std::vector<ForwardOutput> out;
    out.reserve(batch.size());
    for (const auto* req : batch) {
      if (!req) throw std::runtime_error("cuda engine: null request");
      backbone(req->input_ids, nullptr);
      out.push_back(head(*req));
    }
    return out;
  }

  EngineInfo info() const override {
    EngineInfo i;
    i.backend = "cuda";
    i.device = device_;
    i.dtype = std::is_same_v<E, float> ? "float32" : "bfloat16";
    const bool tc = !std::is_same_v<E, float> &&
                    gdn::tc_supported(cfg_.linear_key_head_dim, cfg_.linear_value_head_dim);
    i.kernels["linear_attention"] =
        tc ? "chunked gated delta rule (chunk 64, fp32 state, 3xTF32 mma.sync: parallel prep, "
             "warp-specialised scan, parallel output)"
           : "chunked gated delta rule (chunk 64, fp32 SIMT, value columns split)";

    i.kernels["attention"] = std::is_same_v<E, float>
                                 ? "flash attention fp32 SIMT (generic)"
                                 : "flash attention bf16 mma.sync (sm80+, generic)";
    i.kernels["gemm"] = gemm_.name();
    i.kernels["graphs"] = "per token bucket (8-token steps below 256, then 16 per doubling)";
    i.kernels["head"] =
        std::is_same_v<E, float> ? "cuda joint head fp32" : "cuda joint head (bf16 T-row GEMMs)";
    i.kernels["mode"] = kernels_mode_;
    i.versions = cuda_versions();
    return i;
  }

  PrepareReport prepare(const PrepareOptions& o) override {
    const auto t0 = Clock::now();
    auto say = [&](const std::string& m) {
      if (o.progress) o.progress(m);
    };
    if (o.max_tokens <= 0) throw std::runtime_error("prepare: max_tokens must be positive");
    PrepareReport rep;
    const std::vector<int> buckets = all_buckets(o.max_tokens);
    rep.buckets = static_cast<int>(buckets.size());
    rep.max_bucket = buckets.back();
    ensure_capacity(rep.max_bucket);
    // Timing reads whatever the activations hold: make it finite.
    CLEF_CUDA_CHECK(cudaMemsetAsync(u_.get(), 0, u_.bytes(), stream_));
    CLEF_CUDA_CHECK(cudaMemsetAsync(mid_.get(), 0, mid_.bytes(), stream_));

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
      tune_bucket(buckets[b]);
      if ((b + 1) % 32 == 0 || b + 1 == buckets.size())
        say("GEMM choices: " + std::to_string(b + 1) + "/" + std::to_string(buckets.size()) +
            " buckets (" + std::to_string(seconds_since(t0)) + " s)");
    }
    CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    rep.gemm_shapes = static_cast<int>(gemm_.tuned_shapes());
    rep.gemm_shapes_cached = static_cast<int>(gemm_.preloaded_used() - used_before);
    const bool all_cached =
        st == TuningCacheStatus::Loaded &&
        gemm_.tuned_shapes() - shapes_before == gemm_.preloaded_used() - used_before;
    if (st == TuningCacheStatus::Loaded)
      rep.cache_status = all_cached ? "hit"
                                    : "partial (" + std::to_string(rep.gemm_shapes_cached) +
                                          " of " + std::to_string(rep.gemm_shapes) + ")";
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
    run_layers(buckets.front(), nullptr);
    CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    graph_limit_ = std::max(kMaxGraphs, buckets.size());
    for (int Tp : buckets)
      if (!find_graph(Tp)) capture_graph(Tp);
    CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    rep.graphs_s = seconds_since(t1);
    say("graphs: " + std::to_string(buckets.size()) + " buckets up to " +
        std::to_string(rep.max_bucket) + " tokens (" + std::to_string(rep.graphs_s) + " s)");

    // 3. The head at the largest request the limits admit: its scratch never grows later.
    const auto t2 = Clock::now();
    warm_head(rep.max_bucket, o.max_questions, o.max_options);
    rep.head_s = seconds_since(t2);
    rep.total_s = seconds_since(t0);
    return rep;
  }

  ColdWork cold_work() const override {
    ColdWork c;
    c.graphs_captured = graphs_captured_;
    c.gemm_plans = gemm_.tuned_shapes();
    c.head_allocations = head_->allocations();
    c.workspace_growths = workspace_growths_;
    return c;
  }

  StageTimes forward_profiled(const encoding::EncodedRequest& req) override {
    StageRecorder rec(stream_);
    backbone(req.input_ids, &rec);
    // The head is enqueued while the backbone still runs (as in forward) and synchronises at its
    // end, so this last interval is what the head adds to a request: its device time, the logits'
    // copy and the host's wake-up.
    head(req, [&rec](const char* kind) { rec.mark(kind); });
    rec.mark("head");
    return rec.collect();
  }

  double gemm_floor_ms(int T, int runs) override {
    if (T <= 0) throw std::runtime_error("gemm_floor_ms: T must be positive");
    ensure_capacity(bucket_tokens(T));
    auto all = [&] {
      for (const Layer& L : layers_) {
        gemm_.run(u_.get(), D_, L.w_in.get(), proj_.get(), L.n_in, T, L.n_in, D_, false, stream_);
        gemm_.run(mid_.get(), L.k_out, L.w_out.get(), h_.get(), D_, T, D_, L.k_out, true, stream_);
        gemm_.run(u_.get(), D_, L.w_gu.get(), proj_.get(), 2 * I_, T, 2 * I_, D_, false, stream_);
        gemm_.run(mid_.get(), I_, L.w_down.get(), h_.get(), D_, T, D_, I_, true, stream_);
      }
    };
    all();  // tunes every shape outside the capture
    CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CLEF_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    all();
    CLEF_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    CLEF_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; ++i) CLEF_CUDA_CHECK(cudaGraphLaunch(ge, stream_));
    const double ms =
        median_ms(stream_, runs, [&] { CLEF_CUDA_CHECK(cudaGraphLaunch(ge, stream_)); });
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return ms;
  }

  double backbone_ms(const std::vector<int32_t>& ids, int runs) override {
    backbone(ids, nullptr);  // captures the bucket's graph if it is new
    return median_ms(stream_, runs, [&] { backbone(ids, nullptr); });
  }

  std::vector<float> last_hidden_state(const std::vector<int32_t>& ids) override {
    backbone(ids, nullptr);
    return hidden_host(static_cast<int>(ids.size()));
  }

 private:
  // What a cached GEMM choice depends on besides its shape: device, driver, libraries, policy.
  TuningKey tuning_key() const {
    int dev = 0;
    CLEF_CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    CLEF_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    TuningKey k = cuda_versions();
    k["device"] = prop.name;
    k["compute_capability"] = std::to_string(cc_);
    k["sm_count"] = std::to_string(prop.multiProcessorCount);
    k["dtype"] = std::is_same_v<E, float> ? "float32" : "bfloat16";
    k["policy"] = gemm_.policy();
    return k;
  }

  // One file per model geometry and dtype (entries are keyed by shape; the name keeps two models'
  // caches from overwriting each other).
  std::string tuning_file_name() const {
    std::string shape = std::to_string(D_) + "," + std::to_string(I_);
    for (const Layer& L : layers_)
      shape += "," + std::to_string(L.n_in) + ":" + std::to_string(L.k_out);
    return std::string("gemm-") + (std::is_same_v<E, float> ? "float32" : "bfloat16") + "-" +
           model::sha256_hex(shape).substr(0, 16) + ".json";
  }

  // Chooses (or checks the cached choice of) every distinct GEMM shape of a forward at Tp rows.
  void tune_bucket(int Tp) {
    for (const Layer& L : layers_) {
      gemm_.tune(u_.get(), D_, L.w_in.get(), proj_.get(), L.n_in, Tp, L.n_in, D_, false, stream_);
      gemm_.tune(mid_.get(), L.k_out, L.w_out.get(), h_.get(), D_, Tp, D_, L.k_out, true, stream_);
      gemm_.tune(u_.get(), D_, L.w_gu.get(), proj_.get(), 2 * I_, Tp, 2 * I_, D_, false, stream_);
      gemm_.tune(mid_.get(), I_, L.w_down.get(), h_.get(), D_, Tp, D_, I_, true, stream_);
    }
  }

  cudaGraphExec_t find_graph(int Tp) {
    auto it =
        std::find_if(graphs_.begin(), graphs_.end(), [&](const auto& p) { return p.first == Tp; });
    if (it == graphs_.end()) return nullptr;
    graphs_.splice(graphs_.begin(), graphs_, it);  // most recently used first
    return graphs_.front().second;
  }

  // Captures the backbone at Tp rows (GEMM shapes must already be chosen: no timing in a capture)
  // and uploads the graph so its first launch is as fast as the rest.
  cudaGraphExec_t capture_graph(int Tp) {
    cudaGraph_t g = nullptr;
    CLEF_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      run_layers(Tp, nullptr);
    } catch (...) {
      cudaStreamEndCapture(stream_, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    CLEF_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    cudaGraphExec_t ge = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&ge, g, 0);
    cudaGraphDestroy(g);
    CLEF_CUDA_CHECK(e);
    CLEF_CUDA_CHECK(cudaGraphUpload(ge, stream_));
    ++graphs_captured_;
    graphs_.emplace_front(Tp, ge);
    while (graphs_.size() > graph_limit_) {
      cudaGraphExecDestroy(graphs_.back().second);
      graphs_.pop_back();
    }
    return ge;
  }

  // One head run at T rows with max_questions questions and max_options options (one-token spans,
  // reused round-robin): sizes every head scratch and staging buffer for any admitted request.
  void warm_head(int T, int max_questions, int max_options) {
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
    CLEF_CUDA_CHECK(cudaMemsetAsync(hidden_.get(), 0, hidden_.bytes(), stream_));
    (void)head(enc);
  }

  void validate_config() {
    const auto& c = cfg_;
    D_ = c.hidden_size;
    I_ = c.intermediate_size;
    if (c.linear_key_head_dim > 128 || c.linear_value_head_dim > 128)
      throw std::runtime_error(
          "cuda engine: linear-attention head dims above 128 are not implemented");
    if (c.head_dim % 32 != 0 || c.head_dim > 256)
      throw std::runtime_error(
          "cuda engine: attention head_dim must be a multiple of 32 up to 256");
    if (c.linear_num_key_heads <= 0 || c.linear_num_value_heads % c.linear_num_key_heads != 0)
      throw std::runtime_error(
          "cuda engine: linear_num_value_heads must be a multiple of linear_num_key_heads");
    if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
      throw std::runtime_error(
          "cuda engine: num_attention_heads must be a multiple of num_key_value_heads");
    rd_ = static_cast<int>(c.head_dim * c.partial_rotary_factor);
    if (rd_ % 2 != 0 || rd_ > c.head_dim)
      throw std::runtime_error("cuda engine: bad rotary dimension");
  }

  void upload_weights() {
    const auto& c = cfg_;
    const int L = c.num_hidden_layers;
    auto progress = [&](const std::string& s) { std::fprintf(stderr, "cuda: %s\n", s.c_str()); };
    progress(std::string("uploading weights (") +
             (std::is_same_v<E, float> ? "float32" : "bfloat16") + ") to " + device_);
    {
      std::vector<E> v;
      append(v, rel_->backbone("embed_tokens.weight"));
      embed_ = upload(v);
    }
    final_norm_ = upload(rel_->backbone("norm.weight").to_float());
    const std::vector<float> inv = rope_inv_freq(rd_, c.rope_theta);
    inv_freq_ = upload(inv);
    int max_n = 2 * I_;
    layers_.resize(L);
    for (int i = 0; i < L; ++i) {
      Layer& ly = layers_[i];
      const std::string p = "layers." + std::to_string(i) + ".";
      auto t = [&](const std::string& n) -> const model::Tensor& { return rel_->backbone(p + n); };
      ly.linear = c.layer_types[i] == model::LayerType::LinearAttention;
      ly.in_norm = upload(t("input_layernorm.weight").to_float());
      ly.post_norm = upload(t("post_attention_layernorm.weight").to_float());
      std::vector<E> w;
      if (ly.linear) {
        for (const char* n : {"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight",
                              "linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight"})
          append(w, t(n));
        ly.n_in = static_cast<int>(w.size() / D_);
        ly.w_in = upload(w);
        w.clear();
        append(w, t("linear_attn.conv1d.weight"));
        ly.conv_w = upload(w);
        w.clear();
        ly.A_log = upload(t("linear_attn.A_log").to_float());
        ly.dt_bias = upload(t("linear_attn.dt_bias").to_float());
        ly.gnorm_w = upload(t("linear_attn.norm.weight").to_float());
        append(w, t("linear_attn.out_proj.weight"));
        ly.k_out = c.linear_num_value_heads * c.linear_value_head_dim;
      } else {
        for (const char* n :
             {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"})
          append(w, t(n));
        ly.n_in = static_cast<int>(w.size() / D_);
        ly.w_in = upload(w);
        w.clear();
        ly.q_norm = upload(t("self_attn.q_norm.weight").to_float());
        ly.k_norm = upload(t("self_attn.k_norm.weight").to_float());
        append(w, t("self_attn.o_proj.weight"));
        ly.k_out = c.num_attention_heads * c.head_dim;
      }
      ly.w_out = upload(w);
      w.clear();
      append(w, t("mlp.gate_proj.weight"));
      append(w, t("mlp.up_proj.weight"));
      ly.w_gu = upload(w);
      w.clear();
      append(w, t("mlp.down_proj.weight"));
      ly.w_down = upload(w);
      max_n = std::max(max_n, ly.n_in);
      if ((i + 1) % 8 == 0 || i + 1 == L)
        progress("uploaded layer " + std::to_string(i + 1) + "/" + std::to_string(L));
    }
    max_n_ = max_n;
    max_mid_ = std::max({c.linear_num_value_heads * c.linear_value_head_dim,
                         c.num_attention_heads * c.head_dim, I_});
    progress("weights on device");
  }

  void clear_graphs() {
    for (auto& [T, ge] : graphs_) cudaGraphExecDestroy(ge);
    graphs_.clear();
  }

  void ensure_capacity(int Tp) {
    if (Tp <= cap_) return;
    ++workspace_growths_;
    clear_graphs();  // captured graphs hold the old pointers
    const auto& c = cfg_;
    const size_t es = sizeof(E), T = static_cast<size_t>(Tp);
    h_.resize(T * D_ * es);
    u_.resize(T * D_ * es);
    hidden_.resize(T * D_ * es);
    proj_.resize(T * max_n_ * es);
    mid_.resize(T * max_mid_ * es);
    const size_t qk = T * c.linear_num_key_heads * c.linear_key_head_dim * 4;
    gq_.resize(qk);
    gk_.resize(qk);
    gv_.resize(T * c.linear_num_value_heads * c.linear_value_head_dim * 4);
    gg_.resize(T * c.linear_num_value_heads * 4);
    gb_.resize(T * c.linear_num_value_heads * 4);
    go_.resize(T * c.linear_num_value_heads * c.linear_value_head_dim * es);
    gws_.resize(gdn_workspace_bytes(Tp, c.linear_num_value_heads, c.linear_key_head_dim,
                                    c.linear_value_head_dim));
    aq_.resize(T * c.num_attention_heads * c.head_dim * es);
    ak_.resize(T * c.num_key_value_heads * c.head_dim * es);
    av_.resize(T * c.num_key_value_heads * c.head_dim * es);
    ids_.resize(T * 4);
    hidden_f_.resize(T * D_ * 4);
    cap_ = Tp;
  }

  // The whole backbone at Tp rows (ids already on the device).
  void run_layers(int Tp, StageRecorder* rec) {
    const auto& c = cfg_;
    const float eps = static_cast<float>(c.rms_norm_eps);
    cudaStream_t s = stream_;
    auto mark = [&](const char* l) {
      if (rec) rec->mark(l);
    };
    E* h = h_.get<E>();
    E* u = u_.get<E>();
    E* proj = proj_.get<E>();
    E* mid = mid_.get<E>();
    mark("start");
    embed_gather<E>(embed_.get<E>(), ids_.get<int32_t>(), h, Tp, D_, KernelPath::Auto, s);
    mark("norms_elementwise");
    for (const Layer& L : layers_) {
      rms_norm_1p<E>(h, D_, L.in_norm.get<float>(), u, D_, Tp, D_, eps, KernelPath::Auto, s);
      mark("norms_elementwise");
      gemm_.run(u, D_, L.w_in.get(), proj, L.n_in, Tp, L.n_in, D_, false, s);
      mark("gemm");
      if (L.linear) {
        const int Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads,
                  dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
        const int cqkv = 2 * Hk * dk + Hv * dv;
        GdnPrepArgs a{Tp,
                      L.n_in,
                      Hk,
                      Hv,
                      dk,
                      dv,
                      c.linear_conv_kernel_dim,
                      cqkv + Hv * dv,
                      cqkv + Hv * dv + Hv};
        gdn_conv_prep<E>(proj, L.conv_w.get<E>(), L.A_log.get<float>(), L.dt_bias.get<float>(), a,
                         gq_.get<float>(), gk_.get<float>(), gv_.get<float>(), gg_.get<float>(),
                         gb_.get<float>(), KernelPath::Auto, s);
        mark("norms_elementwise");
        gdn_chunked<E>(gq_.get<float>(), gk_.get<float>(), gv_.get<float>(), gg_.get<float>(),
                       gb_.get<float>(), Tp, Hk, Hv, dk, dv, go_.get<E>(), gws_.get(),
                       KernelPath::Auto, s);
        mark("gdn_core");
        gated_rms_norm<E>(go_.get<E>(), proj + cqkv, L.n_in, L.gnorm_w.get<float>(), mid, Tp, Hv,
                          dv, eps, KernelPath::Auto, s);
        mark("norms_elementwise");
      } else {
        const int nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
        AttnPrepArgs a{Tp, L.n_in, nh, nkv, hd, rd_, eps, inv_freq_.get<float>()};
        attn_prep<E>(proj, L.q_norm.get<float>(), L.k_norm.get<float>(), a, aq_.get<E>(),
                     ak_.get<E>(), av_.get<E>(), KernelPath::Auto, s);
        mark("norms_elementwise");
        if constexpr (std::is_same_v<E, float>)
          attention_core_f32(aq_.get<float>(), ak_.get<float>(), av_.get<float>(), mid, Tp, nh, nkv,
                             hd, s);
        else
          attention_core_bf16(aq_.get<bf16>(), ak_.get<bf16>(), av_.get<bf16>(), mid, Tp, nh, nkv,
                              hd, s);
        mark("attention");
        attn_output_gate<E>(mid, proj, L.n_in, Tp, nh, hd, KernelPath::Auto, s);
        mark("norms_elementwise");
      }
      gemm_.run(mid, L.k_out, L.w_out.get(), h, D_, Tp, D_, L.k_out, true, s);
      mark("gemm");
      rms_norm_1p<E>(h, D_, L.post_norm.get<float>(), u, D_, Tp, D_, eps, KernelPath::Auto, s);
      mark("norms_elementwise");
      gemm_.run(u, D_, L.w_gu.get(), proj, 2 * I_, Tp, 2 * I_, D_, false, s);
      mark("gemm");
      swiglu<E>(proj, mid, Tp, I_, KernelPath::Auto, s);
      mark("norms_elementwise");
      gemm_.run(mid, I_, L.w_down.get(), h, D_, Tp, D_, I_, true, s);
      mark("gemm");
    }
    rms_norm_1p<E>(h, D_, final_norm_.get<float>(), hidden_.get<E>(), D_, Tp, D_, eps,
                   KernelPath::Auto, s);
    mark("norms_elementwise");
  }

  // ids -> hidden_ (device) for the padded bucket; graph replay when the bucket was seen before.
  void backbone(const std::vector<int32_t>& ids, StageRecorder* rec) {
    const int T = static_cast<int>(ids.size());
    if (T <= 0) throw std::runtime_error("cuda engine: empty input");
    for (int32_t id : ids)
      if (id < 0 || id >= cfg_.vocab_size)
        throw std::runtime_error("cuda engine: token id " + std::to_string(id) +
                                 " outside the vocabulary");
    const int Tp = bucket_tokens(T);
    ensure_capacity(Tp);
    std::vector<int32_t> padded(ids);
    padded.resize(Tp, 0);  // right padding: causal ops never let it reach the real rows
    CLEF_CUDA_CHECK(cudaMemcpyAsync(ids_.get(), padded.data(), Tp * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, stream_));
    if (rec) {
      run_layers(Tp, rec);
      return;
    }
    if (cudaGraphExec_t ge = find_graph(Tp)) {
      CLEF_CUDA_CHECK(cudaGraphLaunch(ge, stream_));
      return;
    }
    run_layers(Tp, nullptr);  // eager: chooses this bucket's GEMM algorithms (not prepared)
    CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    capture_graph(Tp);
  }

  std::vector<float> hidden_host(int T) {
    to_float<E>(hidden_.get<E>(), hidden_f_.get<float>(), static_cast<size_t>(T) * D_,
                KernelPath::Auto, stream_);
    std::vector<float> out(static_cast<size_t>(T) * D_);
    CLEF_CUDA_CHECK(cudaMemcpyAsync(out.data(), hidden_f_.get(), out.size() * 4,
                                    cudaMemcpyDeviceToHost, stream_));
    CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return out;
  }

  ForwardOutput head(const encoding::EncodedRequest& req,
                     std::function<void(const char*)> marks = nullptr) {
    ForwardOutput o;
    o.logits = head_->run(hidden_.get(), static_cast<int>(req.input_ids.size()), req, stream_,
                          std::move(marks));
    return o;
  }

  std::shared_ptr<const model::Release> rel_;
  const model::TextConfig& cfg_;
  Gemm gemm_;
  int cc_ = 0;
  std::string device_, kernels_mode_;
  int D_ = 0, I_ = 0, rd_ = 0, max_n_ = 0, max_mid_ = 0, cap_ = 0;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer embed_, final_norm_, inv_freq_;
  std::vector<Layer> layers_;
  DeviceBuffer h_, u_, hidden_, proj_, mid_, gq_, gk_, gv_, gg_, gb_, go_, gws_, aq_, ak_, av_,
      ids_, hidden_f_;
  std::list<std::pair<int, cudaGraphExec_t>> graphs_;
  size_t graph_limit_ = kMaxGraphs;
  size_t graphs_captured_ = 0, workspace_growths_ = 0;
  std::unique_ptr<CudaJointHead> head_;
};

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(std::shared_ptr<const model::Release> release,
                                         const EngineOptions& opts) {
  if (!release) throw std::runtime_error("make_cuda_engine: no release loaded");
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    throw std::runtime_error(std::string("no usable CUDA device (") +
                             (e != cudaSuccess ? cudaGetErrorString(e) : "none found") + ")");
  if (opts.dtype.empty() || opts.dtype == "bfloat16")
    return std::make_unique<Impl<bf16>>(std::move(release), opts);
  if (opts.dtype == "float32") return std::make_unique<Impl<float>>(std::move(release), opts);
  throw std::runtime_error("cuda engine: --dtype must be bfloat16 or float32 (got '" + opts.dtype +
                           "')");
}

}  // namespace clef::engine::cuda

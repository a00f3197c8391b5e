// The CUDA engine: weights uploaded once (weights.h) with horizontally fused projections, the
// backbone (backbone.h) as cuBLASLt GEMMs (gemm/gemm.h) + the kernel families, one CUDA graph per
// padded token bucket (graph_cache.h, engine/prepare/token_buckets.h; right padding is exact:
// every op is causal), then the joint head (joint_head.h) on the real length. prepare()
// (engine_prepare.cpp) does all of the one-time work for every admitted length before serving.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "engine/cuda/attention/kv_tiles.h"
#include "engine/cuda/attention/tuning.h"
#include "engine/cuda/batch_invariance.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/engine_impl.h"
#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/kernels/elementwise.h"
#include "engine/cuda/versions.h"
#include "engine/prepare/token_buckets.h"

namespace clef::engine::cuda {
namespace {

void say(const std::string& m) {
  std::fprintf(stderr, "cuda: %s\n", m.c_str());
}

// The engine's device, current before any member allocates on it (those after config_).
const CudaEngineConfig& on_device(const CudaEngineConfig& c) {
  CLEF_CUDA_CHECK(cudaSetDevice(c.device));
  return c;
}

}  // namespace

CudaEngineImpl::CudaEngineImpl(std::shared_ptr<const model::Release> release,
                               const CudaEngineConfig& config)
    : rel_(std::move(release)),
      cfg_(rel_->text),
      config_(on_device(config)),
      graphs_(kGraphsWithoutPrepare) {
  const int dev = config_.device;
  device_index_ = dev;
  cudaDeviceProp prop{};
  CLEF_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  cc_ = prop.major * 10 + prop.minor;
  sm_count_ = prop.multiProcessorCount;
  device_name_ = prop.name;
  device_ = "cuda:" + std::to_string(dev) + " " + device_name_ + ", sm_" + std::to_string(cc_);
  versions_ = cuda_versions();
  validate_config();
  if (const char* v = std::getenv("CLEF_EXACT_ROWS_FROM")) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (!*v || *end || n < 1)
      throw std::runtime_error(std::string("CLEF_EXACT_ROWS_FROM: a positive token count, not '") +
                               v + "'");
    exact_rows_from_ = static_cast<int>(std::min<long>(n, kExactRowsOff));
  }
  CLEF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // The head's short kernels first wherever both streams have work: its batch's answers wait
  // for it, the next backbone hardly notices.
  int least = 0, greatest = 0;
  CLEF_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CLEF_CUDA_CHECK(cudaStreamCreateWithPriority(&head_stream_, cudaStreamNonBlocking, greatest));
  for (cudaEvent_t* e : {&pack_done_, &hidden_read_, &done_events_[0], &done_events_[1]})
    CLEF_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  say(std::string("uploading weights (") + data_type_name(config_.weights) + ") to " + device_);
  weights_ = upload_backbone_weights(*rel_, config_.activations, config_.weights, say);
  say("weights on device");
  workspace_ = std::make_unique<Workspace>(cfg_, config_.activations, weights_.max_in_proj,
                                           config_.weights == DataType::F8_E4M3);
  backbone_ = std::make_unique<CudaBackbone>(cfg_, weights_, gemm_, config_.kernels);
  head_ = std::make_unique<CudaJointHead>(
      *rel_,
      config_.activations == DataType::F32 ? HeadPrecision::Float32 : HeadPrecision::BFloat16,
      head_gemm_, nullptr, [](const std::string& m) { say("head: " + m); });
  if (rel_->vision) {
    vision_ =
        std::make_unique<CudaVisionTower>(*rel_, config_.activations, gemm_, config_.kernels, say);
    say("vision tower on device");
  }
}

CudaEngineImpl::~CudaEngineImpl() {
  cudaSetDevice(device_index_);  // the members free on it too; a destructor cannot throw
  // Open batches may still read the staging and scratch that the members free.
  if (stream_) cudaStreamSynchronize(stream_);
  if (head_stream_) cudaStreamSynchronize(head_stream_);
  graphs_.clear();
  for (cudaEvent_t e : {pack_done_, hidden_read_, done_events_[0], done_events_[1]})
    if (e) cudaEventDestroy(e);
  if (head_stream_) cudaStreamDestroy(head_stream_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaEngineImpl::validate_config() const {
  const auto& c = cfg_;
  if (c.linear_key_head_dim > 128 || c.linear_value_head_dim > 128)
    throw std::runtime_error(
        "cuda engine: linear-attention head dims above 128 are not implemented");
  if (c.head_dim % 32 != 0 || c.head_dim > 256)
    throw std::runtime_error("cuda engine: attention head_dim must be a multiple of 32 up to 256");
  if (c.linear_num_key_heads <= 0 || c.linear_num_value_heads % c.linear_num_key_heads != 0)
    throw std::runtime_error(
        "cuda engine: linear_num_value_heads must be a multiple of linear_num_key_heads");
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    throw std::runtime_error(
        "cuda engine: num_attention_heads must be a multiple of num_key_value_heads");
  const int rd = static_cast<int>(c.head_dim * c.partial_rotary_factor);
  if (rd % 2 != 0 || rd > c.head_dim) throw std::runtime_error("cuda engine: bad rotary dimension");
}

// A batch is validated whole before anything is enqueued. Consecutive requests are packed into
// one backbone forward (packing.h) up to pack_tokens_ rows and kMaxPackedSequences sequences (a
// longer request, or one with media, runs alone); the head then runs once a pack on the pack's
// rows (one launch set for its requests, joint_head.h) on head_stream_, while stream_ goes on
// with the next pack or the next batch. The host waits twice a batch: for its backbone
// (await_device) and for its logits (end).
std::vector<ForwardOutput> CudaEngineImpl::forward(
    const std::vector<const encoding::EncodedRequest*>& batch) {
  require_no_flight("forward");
  return end(begin(batch));
}

ForwardPipeline::Ticket CudaEngineImpl::begin(
    const std::vector<const encoding::EncodedRequest*>& batch) {
  use_device();
  if (flights_.size() >= 2)
    throw std::logic_error("cuda engine: two batches are open; end the older one first");
  for (const auto* req : batch) {
    if (!req) throw std::runtime_error("cuda engine: null request");
    check_ids(req->input_ids);
    if (req->has_media()) check_media(*req);
    head_->check(*req);  // the head may begin later, after the earlier batch ends
  }
  // The staging below is the earlier batch's until its uploads have run: they precede its
  // backbone's end, which the server awaited already (so this wait is free there).
  if (!flights_.empty()) await_device(flights_.back().ticket);
  Flight f;
  f.ticket = next_ticket_++;
  f.batch = batch;
  f.done = done_events_[f.ticket % 2];
  std::vector<Pack>& packs = f.packs;
  size_t staged = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const bool media = batch[i]->has_media();
    const int T = static_cast<int>(batch[i]->input_ids.size());
    // A request with media runs alone (its rows and positions are its own).
    if (media || packs.empty() || packs.back().media || packs.back().tokens + T > pack_tokens_ ||
        packs.back().count == kMaxPackedSequences)
      packs.push_back({i, 0, 0, 0, media, {}, {}, nullptr});
    Pack& p = packs.back();
    p.lengths.push_back(T);
    p.tokens += T;
    ++p.count;
  }
  for (Pack& p : packs) {
    p.Tp = p.count > 1 ? pack_rows(p.tokens) : bucket_tokens(p.tokens);
    if (p.count > 1) {
      p.tables = pack_tables(p.lengths, p.Tp, sequence_bucket(p.count), rows_per_tile(p.Tp));
      staged += table_ints(p.tables);
    }
    staged += static_cast<size_t>(p.Tp);
  }
  // Every pack's ids (then its tables) in pinned memory: their uploads queue behind earlier work
  // instead of waiting for it (a pageable upload would wait for the stream).
  int32_t* pinned = pinned_staging(staged);
  for (Pack& p : packs) {
    p.ids = pinned;
    for (int j = 0; j < p.count; ++j) {
      const auto& in = batch[p.first + j]->input_ids;
      pinned = std::copy(in.begin(), in.end(), pinned);
    }
    std::fill(pinned, p.ids + p.Tp, 0);
    pinned = p.ids + p.Tp;
    if (p.count > 1) pinned += table_ints(p.tables);
  }
  flights_.push_back(std::move(f));
  Flight& fl = flights_.back();
  try {
    if (fl.packs.empty()) {  // nothing to run: end() answers an empty batch with no outputs
      fl.head_enqueued = true;
      CLEF_CUDA_CHECK(cudaEventRecord(fl.done, stream_));
    } else if (flights_.size() == 1) {
      start_head(fl);
    } else {
      // The head is the earlier batch's until it ends: only the first pack's backbone can run
      // now (the next one would overwrite final_hidden before this batch's head has read it).
      launch_pack(fl, 0);
    }
  } catch (...) {
    fl.error = std::current_exception();
  }
  return fl.ticket;
}

void CudaEngineImpl::await_device(Ticket t) {
  Flight& f = flight(t);
  if (f.error) return;
  try {
    use_device();
    if (f.launched < f.packs.size()) {
      if (&f != &flights_.front())
        throw std::logic_error("cuda engine: end the older batch before awaiting this one");
      start_head(f);
    }
    CLEF_CUDA_CHECK(cudaEventSynchronize(f.done));  // at once when it has passed
  } catch (...) {
    f.error = std::current_exception();
  }
}

std::vector<ForwardOutput> CudaEngineImpl::end(Ticket t) {
  if (flights_.empty() || flights_.front().ticket != t)
    throw std::logic_error("cuda engine: batches end in the order they began");
  use_device();
  Flight f = std::move(flights_.front());
  flights_.pop_front();
  std::vector<ForwardOutput> out;
  if (!f.error) {
    try {
      if (!f.head_enqueued) start_head(f);
      if (!f.packs.empty()) {
        std::vector<std::vector<std::vector<float>>> logits = head_->finish(head_stream_);
        out.resize(f.batch.size());
        for (size_t i = 0; i < out.size(); ++i) out[i].logits = std::move(logits[i]);
      }
    } catch (...) {
      f.error = std::current_exception();
    }
  }
  // The head is free: the next batch's can start (its first backbone pack already runs).
  if (!flights_.empty() && !flights_.front().head_enqueued && !flights_.front().error) {
    try {
      start_head(flights_.front());
    } catch (...) {
      flights_.front().error = std::current_exception();
    }
  }
  if (f.error) std::rethrow_exception(f.error);
  return out;
}

CudaEngineImpl::Flight& CudaEngineImpl::flight(Ticket t) {
  for (Flight& f : flights_)
    if (f.ticket == t) return f;
  throw std::logic_error("cuda engine: no open batch has this ticket");
}

void CudaEngineImpl::launch_pack(Flight& f, size_t i) {
  const Pack& p = f.packs[i];
  CLEF_CUDA_CHECK(cudaStreamWaitEvent(stream_, hidden_read_, 0));
  if (p.media) {
    run_media(*f.batch[p.first], p.ids, p.Tp, nullptr);
  } else if (p.count == 1) {
    run_backbone(p.ids, p.Tp, nullptr);
  } else {
    run_packed(p.ids, p.tables, p.ids + p.Tp);
  }
  CLEF_CUDA_CHECK(cudaEventRecord(pack_done_, stream_));
  if (++f.launched == f.packs.size()) CLEF_CUDA_CHECK(cudaEventRecord(f.done, stream_));
}

void CudaEngineImpl::start_head(Flight& f) {
  std::vector<int> groups;  // the head runs once a pack
  for (const Pack& p : f.packs) groups.push_back(p.count);
  head_->begin(f.batch, head_stream_, groups);
  for (size_t i = 0; i < f.packs.size(); ++i) {
    // pack_done_ was last recorded by pack i: by launch_pack just now, or (i == 0) by begin(),
    // with nothing recorded since.
    if (i >= f.launched) launch_pack(f, i);
    CLEF_CUDA_CHECK(cudaStreamWaitEvent(head_stream_, pack_done_, 0));
    head_->enqueue(workspace_->buffers().final_hidden, head_stream_, nullptr, hidden_read_);
  }
  f.head_enqueued = true;
}

void CudaEngineImpl::require_no_flight(const char* what) const {
  if (!flights_.empty())
    throw std::logic_error(std::string("cuda engine: ") + what + " while a batch is open");
}

int CudaEngineImpl::rows_per_tile(int Tp) const {
  // The kernel the backbone picks at Tp's bucket (pack_rows: Tp may lie between two).
  return attention_rows_per_tile(config_.activations != DataType::F32, bucket_tokens(Tp),
                                 cfg_.num_attention_heads, cfg_.head_dim,
                                 config_.kernels == KernelPath::Generic);
}

int32_t* CudaEngineImpl::pinned_staging(size_t ints) {
  if (ints * sizeof(int32_t) > ids_pinned_.bytes()) {
    CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));  // an abandoned batch may still read it
    ids_pinned_.resize(ints * sizeof(int32_t));
  }
  return ids_pinned_.get<int32_t>();
}

size_t CudaEngineImpl::table_ints(const PackTables& t) {
  return t.positions.size() + t.chunk_row0.size() + t.chunk_valid.size() + t.seq_chunk0.size() +
         t.tiles.size() + t.kv_rows.size() + 1;  // + the GDN core flag
}

void CudaEngineImpl::run_packed(const int32_t* padded_ids, const PackTables& t, int32_t* staging) {
  const PackView view = upload_pack(padded_ids, t, staging);
  launch_or_capture(GraphKey{t.rows, t.seq_slots, config_.weights}, &view);
}

PackView CudaEngineImpl::upload_pack(const int32_t* padded_ids, const PackTables& t,
                                     int32_t* staging) {
  const int Tp = t.rows;
  reserve(Tp);
  const Activations& a = workspace_->buffers();
  CLEF_CUDA_CHECK(
      cudaMemcpyAsync(a.ids, padded_ids, Tp * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  auto upload = [&](int32_t* dst, const std::vector<int32_t>& src) {
    std::copy(src.begin(), src.end(), staging);
    CLEF_CUDA_CHECK(cudaMemcpyAsync(dst, staging, src.size() * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, stream_));
    staging += src.size();
  };
  upload(a.positions, t.positions);
  upload(a.chunk_row0, t.chunk_row0);
  upload(a.chunk_valid, t.chunk_valid);
  upload(a.seq_chunk0, t.seq_chunk0);
  upload(a.tiles, t.tiles);
  if (kv_sequence_tiles()) upload(a.kv_rows, t.kv_rows);  // read by attn_prep only then
  // Which GDN core this pack runs where the process picks per pack (gdn/core_choice.h); read by
  // the captured kernels of both cores, by no kernel otherwise (no estimate then).
  const bool fused =
      gdn_fused_mode() == GdnFusedMode::PerPack &&
      gdn_fused_pays(t.seq_chunk0, cfg_.linear_num_value_heads, sm_count_, gdn_costs_);
  upload(a.gdn_core, {fused ? 1 : 0});
  return pack_view(t.rows, t.seq_slots);
}

int CudaEngineImpl::pack_rows(int tokens) const {
  const int bucket = bucket_tokens(tokens);
  return bucket >= exact_rows_from_ ? (tokens + 7) / 8 * 8 : bucket;
}

bool CudaEngineImpl::eager_rows(int rows) const {
  return bucket_tokens(rows) >= exact_rows_from_;  // bucket_tokens(pack_rows(T)) = that of T
}

void CudaEngineImpl::launch_or_capture(const GraphKey& key, const PackView* view) {
  if (view && eager_rows(key.tokens)) {
    backbone_->enqueue(workspace_->buffers(), key.tokens, stream_, nullptr, view);
    return;
  }
  if (cudaGraphExec_t ge = graphs_.find(key)) {
    CLEF_CUDA_CHECK(cudaGraphLaunch(ge, stream_));
    return;
  }
  const Activations& a = workspace_->buffers();
  backbone_->enqueue(a, key.tokens, stream_, nullptr, view);  // eager: the bucket's GEMM choices
  CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  graphs_.capture(key, stream_, [&] { backbone_->enqueue(a, key.tokens, stream_, nullptr, view); });
}

PackView CudaEngineImpl::pack_view(int Tp, int seq_slots) const {
  const Activations& a = workspace_->buffers();
  PackView v;
  v.positions = a.positions;
  v.kv_rows = a.kv_rows;
  v.gdn = {a.chunk_row0, a.chunk_valid, a.seq_chunk0, gdn_chunk_slots(Tp, seq_slots),
           seq_slots,    a.gdn_core};
  v.attn = {a.tiles, attention_tile_slots(Tp, seq_slots, rows_per_tile(Tp))};
  // Per-sequence key tiles (kv_tiles.h) where they are on; else key tiles follow the global row.
  v.attn.kv_head_blocks = kv_sequence_tiles() ? kv_head_blocks(Tp, seq_slots) : 0;
  return v;
}

EngineInfo CudaEngineImpl::info() const {
  const bool f32 = config_.activations == DataType::F32;
  EngineInfo i;
  i.backend = "cuda";
  i.device = device_;
  const bool fp8 = config_.weights == DataType::F8_E4M3;
  i.dtype = fp8 ? "fp8" : data_type_name(config_.activations);
  if (fp8) i.quantization = "fp8-e4m3-block128";
  // Each dispatcher's own choice at this model's shapes.
  std::map<std::string, std::string> v = backbone_->kernel_variants();
  const bool tc =
      v.contains("gdn_chunked") && v.at("gdn_chunked") == std::string("gdn_tensor_core");
  i.kernels["linear_attention"] =
      tc ? "chunked gated delta rule (chunk 64, fp32 state, bf16 mma.sync with fp32 operands in "
           "split bf16 terms on the recurrence: parallel prep, warp-specialised scan, parallel "
           "output from the states and Vn in bf16)"
         : "chunked gated delta rule (chunk 64, fp32 SIMT, value columns split)";
  if (vision_) v.merge(vision_->kernel_variants());
  std::string ew;
  for (const auto& [op, name] : v) ew += (ew.empty() ? "" : ", ") + name;
  i.kernels["elementwise"] = ew;
  if (f32) {
    i.kernels["attention"] = "flash attention fp32 SIMT (generic)";
  } else {
    // tuning.h's names: w* mma.sync (sm_80+), wg* the Hopper warpgroup-MMA kernel (sm_90).
    std::string a = "flash attention bf16: backbone " +
                    attention_variant_name(backbone_->attention_kernel(4096));
    if (vision_) a += ", vision tower " + vision_->attention_kernel();
    i.kernels["attention"] = a + " (w*: mma.sync, sm_80+; wg*: warpgroup MMA, sm_90)";
  }
  i.kernels["gemm"] = std::string("cublaslt ") +
                      (f32 ? "fp32 (COMPUTE_32F, no TF32)" : "bf16 (fp32 accumulate)") +
                      ", timed heuristic candidates";
  if (fp8)
    i.kernels["gemm"] =
        "cublaslt fp8 e4m3 (activations 1x128 per token, quantised by their producing kernels; "
        "weights 128x128 blocks) for " +
        std::to_string(weights_.fp8_gemms) + " projections (" +
        std::to_string(weights_.fp8_from_checkpoint) + " as the release stores them, the rest " +
        "quantised at load), bf16 for " + std::to_string(weights_.bf16_gemms) +
        " the FP8 GEMM does not take and for GDN in_proj_b/a; fp32 accumulate, timed heuristic "
        "candidates";
  i.kernels["graphs"] =
      "per token bucket (8-token steps below 512, then 32 per doubling) x packed-sequence bucket "
      "(1, 2, 4, ... 64)";
  i.kernels["head"] = f32 ? "cuda joint head fp32" : "cuda joint head (bf16 T-row GEMMs)";
  i.kernels["mode"] = kernel_path_name(config_.kernels);
  i.versions = versions_;
  return i;
}

void CudaEngineImpl::reserve(int Tp) {
  // A growth frees the old block, whose final_hidden an open head may still be reading.
  if (Tp > workspace_->tokens()) CLEF_CUDA_CHECK(cudaStreamSynchronize(head_stream_));
  if (workspace_->reserve(Tp)) {
    graphs_.clear();  // captured graphs hold the old pointers
    // Finite from the start: prepare()'s GEMM timing reads whatever the activations hold, and
    // rows past a pack's exact rows (pack_rows) keep what they held.
    CLEF_CUDA_CHECK(cudaMemsetAsync(workspace_->base(), 0, workspace_->bytes(), stream_));
  }
}

void CudaEngineImpl::check_ids(const std::vector<int32_t>& ids) const {
  if (ids.empty()) throw std::runtime_error("cuda engine: empty input");
  for (int32_t id : ids)
    if (id < 0 || id >= cfg_.vocab_size)
      throw std::runtime_error("cuda engine: token id " + std::to_string(id) +
                               " outside the vocabulary");
}

void CudaEngineImpl::run_backbone(const std::vector<int32_t>& ids, StageRecorder* rec, int layers) {
  check_ids(ids);
  const int Tp = bucket_tokens(static_cast<int>(ids.size()));
  std::vector<int32_t> padded(ids);
  padded.resize(Tp, 0);  // right padding: causal ops never let it reach the real rows
  // A pageable upload returns once the driver has staged the bytes: `padded` may go away.
  run_backbone(padded.data(), Tp, rec, layers);
}

void CudaEngineImpl::run_backbone(const int32_t* padded_ids, int Tp, StageRecorder* rec,
                                  int layers) {
  reserve(Tp);
  const Activations& a = workspace_->buffers();
  CLEF_CUDA_CHECK(
      cudaMemcpyAsync(a.ids, padded_ids, Tp * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  if (rec || layers >= 0) {  // eager (the bucket's graph runs every layer, unrecorded)
    backbone_->enqueue(a, Tp, stream_, rec, nullptr, nullptr, layers);
    return;
  }
  launch_or_capture(GraphKey{Tp, 1, config_.weights}, nullptr);
}

void CudaEngineImpl::check_media(const encoding::EncodedRequest& req) const {
  if (!vision_)
    throw std::runtime_error("cuda engine: this model has no vision tower (images and videos)");
  CudaVisionTower::check(req.visual);
  const size_t T = req.input_ids.size();
  if (req.mm_token_type_ids.size() != T || req.position_ids.size() != 3 * T)
    throw std::runtime_error(
        "cuda engine: a media request needs token types [T] and positions "
        "[3][T]");
  int64_t pads = 0, tokens = 0;
  for (uint8_t t : req.mm_token_type_ids) pads += (t == 1 || t == 2) ? 1 : 0;
  for (const auto& g : req.visual.image_grids) tokens += g.tokens();
  for (const auto& g : req.visual.video_grids) tokens += g.tokens();
  if (pads != tokens)
    throw std::runtime_error("cuda engine: " + std::to_string(pads) + " pad tokens for " +
                             std::to_string(tokens) + " vision rows");
}

void CudaEngineImpl::run_media(const encoding::EncodedRequest& req, const int32_t* padded_ids,
                               int Tp, StageRecorder* rec) {
  reserve(Tp);
  const Activations& a = workspace_->buffers();
  // The tower first: it synchronises the stream before staging its inputs, so the tables below
  // (one pinned area) are never overwritten while an earlier request's upload reads them.
  const void* rows = vision_->enqueue(req.visual, stream_, rec);
  const int T = static_cast<int>(req.input_ids.size());
  // Pad rows in the tower's order: every image pad (type 1) in order, then every video pad.
  std::vector<int32_t> pad_rows;
  for (uint8_t want : {uint8_t{1}, uint8_t{2}})
    for (int t = 0; t < T; ++t)
      if (req.mm_token_type_ids[t] == want) pad_rows.push_back(t);
  const size_t n = pad_rows.size(), ints = n + 3 * static_cast<size_t>(Tp);
  media_pinned_.resize(ints * sizeof(int32_t));
  media_tables_.resize(ints * sizeof(int32_t));
  int32_t* h = media_pinned_.get<int32_t>();
  std::copy(pad_rows.begin(), pad_rows.end(), h);
  for (int axis = 0; axis < 3; ++axis) {
    int32_t* dst = h + n + static_cast<size_t>(axis) * Tp;
    std::copy_n(req.position_ids.begin() + static_cast<size_t>(axis) * T, T, dst);
    std::fill(dst + T, dst + Tp, 0);  // padding rows: causal, never seen by the real ones
  }
  int32_t* d = media_tables_.get<int32_t>();
  CLEF_CUDA_CHECK(cudaMemcpyAsync(d, h, ints * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  CLEF_CUDA_CHECK(
      cudaMemcpyAsync(a.ids, padded_ids, Tp * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  const MediaView mv{rows, d, static_cast<int>(n), d + n};
  backbone_->enqueue(a, Tp, stream_, rec, nullptr, &mv);
}

void CudaEngineImpl::run_media(const encoding::EncodedRequest& req, StageRecorder* rec) {
  check_ids(req.input_ids);
  check_media(req);
  std::vector<int32_t> padded(req.input_ids);
  padded.resize(bucket_tokens(static_cast<int>(req.input_ids.size())), 0);
  // A pageable upload returns once the driver has staged the bytes: `padded` may go away.
  run_media(req, padded.data(), static_cast<int>(padded.size()), rec);
}

std::vector<float> CudaEngineImpl::hidden_host(int T) {
  const Activations& a = workspace_->buffers();
  const size_t n = static_cast<size_t>(T) * cfg_.hidden_size;
  if (config_.activations == DataType::F32)
    to_float<float>(static_cast<const float*>(a.final_hidden), a.hidden_f32, n, config_.kernels,
                    stream_);
  else
    to_float<__nv_bfloat16>(static_cast<const __nv_bfloat16*>(a.final_hidden), a.hidden_f32, n,
                            config_.kernels, stream_);
  std::vector<float> out(n);
  CLEF_CUDA_CHECK(
      cudaMemcpyAsync(out.data(), a.hidden_f32, n * 4, cudaMemcpyDeviceToHost, stream_));
  CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

int64_t CudaEngineImpl::memory_used_bytes() const {
  // The caller's thread (the server's event loop) may have another device current.
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) return -1;
  if (prev != device_index_ && cudaSetDevice(device_index_) != cudaSuccess) return -1;
  size_t free_b = 0, total_b = 0;
  const bool ok = cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
  if (prev != device_index_) cudaSetDevice(prev);
  return ok ? static_cast<int64_t>(total_b - free_b) : -1;
}

ForwardOutput CudaEngineImpl::run_head(const encoding::EncodedRequest& req,
                                       std::function<void(const char*)> marks) {
  ForwardOutput o;
  o.logits = head_->run(workspace_->buffers().final_hidden, static_cast<int>(req.input_ids.size()),
                        req, stream_, std::move(marks));
  return o;
}

std::unique_ptr<Engine> make_cuda_engine(std::shared_ptr<const model::Release> release,
                                         const EngineOptions& opts) {
  if (!release) throw std::runtime_error("make_cuda_engine: no release loaded");
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    throw std::runtime_error(std::string("no usable CUDA device (") +
                             (e != cudaSuccess ? cudaGetErrorString(e) : "none found") + ")");
  if (opts.device_index < 0 || opts.device_index >= n)
    throw std::runtime_error("no CUDA device cuda:" + std::to_string(opts.device_index) +
                             ": this machine has " + std::to_string(n) + " (cuda:0" +
                             (n > 1 ? "..cuda:" + std::to_string(n - 1) : "") + ")");
  CudaEngineConfig c;
  c.device = opts.device_index;
  switch (opts.dtype) {
    case DType::Default:
    case DType::BFloat16:
      c.activations = c.weights = DataType::BF16;
      break;
    case DType::Float32:
      c.activations = c.weights = DataType::F32;
      break;
    case DType::FP8:  // bf16 activations, the big projections' weights in FP8 (docs/engine.md)
      c.activations = DataType::BF16;
      c.weights = DataType::F8_E4M3;
      break;
    default:
      throw std::runtime_error(
          "cuda engine: --dtype must be bfloat16, float32 or fp8 (fp8-emulated "
          "is the cpu backend's FP8 oracle)");
  }
  switch (opts.kernels) {
    case Kernels::Auto:
      c.kernels = KernelPath::Auto;
      break;
    case Kernels::Generic:
      c.kernels = KernelPath::Generic;
      break;
    default:
      throw std::runtime_error("cuda engine: --kernels must be auto or generic");
  }
  return std::make_unique<CudaEngineImpl>(std::move(release), c);
}

}  // namespace clef::engine::cuda

// The CUDA engine's composition, private to src/engine/cuda: the parts (weights, workspace, GEMM
// module, graph cache, backbone, joint head) and the Engine interface over them. Its methods live
// in three files by job: cuda_engine.cpp (construction, forward, info), engine_prepare.cpp
// (prepare: GEMM choices, the tuning cache, graphs, head warm-up) and engine_profile.cpp (the
// CudaEngine diagnostics).
#pragma once

#include <cuda_runtime.h>

#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <string>

#include "engine/cuda/backbone.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/gdn/core_choice.h"
#include "engine/cuda/gemm/gemm.h"
#include "engine/cuda/graph_cache.h"
#include "engine/cuda/joint_head.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/packing.h"
#include "engine/cuda/vision/vision_tower.h"
#include "engine/cuda/weights.h"
#include "engine/cuda/workspace.h"
#include "engine/pipeline.h"
#include "engine/prepare/tuning_cache.h"

namespace clef::engine::cuda {

class StageRecorder;

// Graphs kept without prepare() (CLI, tests): every bucket up to ~90k tokens, so a cyclic mix of
// lengths never thrashes. prepare() keeps every bucket it captured, whatever their number.
constexpr size_t kGraphsWithoutPrepare = 256;

// What the engine runs as: the activation type, the GEMM weights' type, and the kernel variants.
struct CudaEngineConfig {
  DataType activations = DataType::BF16;
  DataType weights = DataType::BF16;
  KernelPath kernels = KernelPath::Auto;
  int device = 0;  // the CUDA device index it runs on
};

class CudaEngineImpl final : public CudaEngine, public ForwardPipeline {
 public:
  CudaEngineImpl(std::shared_ptr<const model::Release> release, const CudaEngineConfig& config);
  ~CudaEngineImpl() override;

  // begin + end of one batch (no other batch may be open).
  std::vector<ForwardOutput> forward(
      const std::vector<const encoding::EncodedRequest*>& batch) override;
  // The pipeline (engine/pipeline.h): a batch's backbone packs on stream_, its head on
  // head_stream_ (its own cuBLASLt workspace), so the head of batch k runs beside the backbone of
  // batch k+1. A pack's backbone waits only until the previous group's head has read
  // final_hidden (hidden_read_); the head waits for its pack (pack_done_).
  ForwardPipeline* native_pipeline() override { return this; }
  Ticket begin(const std::vector<const encoding::EncodedRequest*>& batch) override;
  void await_device(Ticket t) override;
  std::vector<ForwardOutput> end(Ticket t) override;
  EngineInfo info() const override;
  PrepareReport prepare(const PrepareOptions& o) override;
  int64_t memory_used_bytes() const override;
  bool supports_media() const override { return vision_ != nullptr; }

  ColdWork cold_work() const override;
  StageTimes forward_profiled(const encoding::EncodedRequest& req) override;
  StageTimes forward_profiled(const std::vector<const encoding::EncodedRequest*>& batch) override;
  double gemm_floor_ms(int T, int runs) override;
  double backbone_ms(const std::vector<int32_t>& ids, int runs) override;
  std::vector<float> last_hidden_state(const std::vector<int32_t>& ids) override;
  std::vector<float> packed_hidden_state(const std::vector<std::vector<int32_t>>& seqs,
                                         int layers) override;
  std::vector<float> last_hidden_state(const encoding::EncodedRequest& req,
                                       std::vector<float>* vision_rows) override;
  double vision_gemm_floor_ms(const media::VisualInput& visual, int runs) override;

 private:
  void validate_config() const;
  // Every public entry point that touches the GPU makes the engine's device current first: the
  // caller's thread may run another device's engine too (serve with several GPUs).
  void use_device() const { CLEF_CUDA_CHECK(cudaSetDevice(device_index_)); }
  // Room for Tp rows; drops the graphs when the workspace moved.
  void reserve(int Tp);
  // ids -> workspace final_hidden for the padded bucket: replays the bucket's graph (capturing it
  // first when new), or runs eagerly when `rec` (events) or `layers` >= 0 (only the first that
  // many decoder layers, then the final norm) is given.
  void run_backbone(const std::vector<int32_t>& ids, StageRecorder* rec, int layers = -1);
  // The same from Tp right-padded ids in memory that outlives the enqueued upload (pinned).
  void run_backbone(const int32_t* padded_ids, int Tp, StageRecorder* rec, int layers = -1);
  // Two or more sequences' ids (checked; one pack, else std::runtime_error naming `what`) padded
  // to their bucket Tp and uploaded with their pack's tables through the pinned staging, as
  // forward() uploads them (upload_pack): the view of the tables.
  PackView stage_pack(const std::vector<const std::vector<int32_t>*>& seqs, const char* what,
                      int& Tp);
  // Several requests' padded ids through one packed forward (packing.h): uploads the ids and the
  // tables (through `staging`, pinned, table_ints(t) ints) and replays the (bucket, sequence
  // bucket) graph, capturing it first when new.
  void run_packed(const int32_t* padded_ids, const PackTables& t, int32_t* staging);
  // run_packed's uploads (the workspace reserved for t.rows first): the view of the tables.
  PackView upload_pack(const int32_t* padded_ids, const PackTables& t, int32_t* staging);
  // Replays the graph of `key` (the inputs already uploaded), capturing it first when new after
  // one eager run (which chooses the bucket's GEMM algorithms outside the capture); a pack at its
  // exact rows (pack_rows) runs eagerly instead.
  void launch_or_capture(const GraphKey& key, const PackView* view);
  // The rows a pack of `tokens` tokens runs: its token bucket (a captured graph), or from
  // exact_rows_from_ tokens' buckets on, the tokens rounded up to 8 (every bucket is a multiple
  // of 8, so each kernel meets row counts it meets at small buckets), run eagerly with the
  // bucket's choices (Gemm::run_as for the GEMMs): the bucket's padding rows (up to 1/32 of the
  // pack) would cost GEMM time, while at large sizes the launches of an eager forward (~400)
  // should hide behind the device's work (docs/perf-log.md v40). Lone requests keep their buckets.
  int pack_rows(int tokens) const;
  bool eager_rows(int rows) const;  // a pack at these rows runs eagerly (no graph)
  PackView pack_view(int Tp, int seq_slots) const;
  // A request with images or videos (checked by check_media): the vision tower, then the backbone
  // eagerly (no graph: the tower's rows and 3-D positions are per request) on Tp right-padded ids
  // in pinned memory.
  void run_media(const encoding::EncodedRequest& req, const int32_t* padded_ids, int Tp,
                 StageRecorder* rec);
  // The same after the checks, padding the ids itself (diagnostics and warm-up).
  void run_media(const encoding::EncodedRequest& req, StageRecorder* rec);
  void check_media(const encoding::EncodedRequest& req) const;
  void warm_media();  // prepare()'s last step when the release has a tower
  int rows_per_tile(int Tp) const;
  static size_t table_ints(const PackTables& t);
  // ids_pinned_ with room for `ints` int32 values (grown after the stream drains).
  int32_t* pinned_staging(size_t ints);
  // A batch between begin() and end(): its packs (ids and tables staged in ids_pinned_), how many
  // of their backbones are enqueued, whether its head is, and the error end() reports.
  struct Flight;
  Flight& flight(Ticket t);
  // Enqueues pack i's backbone on stream_ behind the previous group's read of final_hidden, then
  // records pack_done_ (and the flight's `done` after its last pack).
  void launch_pack(Flight& f, size_t i);
  // The flight's head (the head must be free: no earlier flight open): begin(), then per pack its
  // backbone (if not yet enqueued) and its group on head_stream_.
  void start_head(Flight& f);
  // Throws when a flight is open: forward() and the diagnostics run the head on stream_.
  void require_no_flight(const char* what) const;
  void check_ids(const std::vector<int32_t>& ids) const;
  std::vector<float> hidden_host(int T);
  ForwardOutput run_head(const encoding::EncodedRequest& req,
                         std::function<void(const char*)> marks = nullptr);
  // prepare()'s parts (engine_prepare.cpp).
  TuningKey tuning_key() const;
  std::string tuning_file_name() const;
  void warm_head(int T, int max_questions, int max_options);

  std::shared_ptr<const model::Release> rel_;
  const model::TextConfig& cfg_;
  CudaEngineConfig config_;
  int cc_ = 0, sm_count_ = 0, device_index_ = 0;
  const GdnCoreCosts gdn_costs_ = gdn_core_costs();  // the per-pack GDN core choice's estimates
  std::string device_, device_name_;
  std::map<std::string, std::string> versions_;  // driver and libraries, read once
  cudaStream_t stream_ = nullptr;
  cudaStream_t head_stream_ = nullptr;  // the pipeline's heads (high priority: short kernels)
  cudaEvent_t pack_done_ = nullptr, hidden_read_ = nullptr;
  Gemm gemm_;
  Gemm head_gemm_;  // the head's GEMMs may run beside the backbone's: a workspace of their own
  BackboneWeights weights_;
  std::unique_ptr<Workspace> workspace_;
  std::unique_ptr<CudaBackbone> backbone_;
  GraphCache graphs_;
  std::unique_ptr<CudaJointHead> head_;
  std::unique_ptr<CudaVisionTower> vision_;  // when the release has a tower
  PinnedBuffer media_pinned_;                // a media request's pad rows and 3-D positions
  DeviceBuffer media_tables_;
  PinnedBuffer ids_pinned_;  // a batch's padded ids and pack tables
  // Rows one packed forward takes at most: the largest prepared bucket (the default request
  // length until prepare() says otherwise).
  int pack_tokens_ = encoding::kDefaultMaxLength;
  // Buckets from which packs run at their exact rows: CLEF_EXACT_ROWS_FROM (tokens; read when
  // the engine is made), else none: off by default until a device measures it (perf-log v40 has
  // the prediction; 4096 is the candidate default).
  static constexpr int kExactRowsOff = 1 << 30;
  int exact_rows_from_ = kExactRowsOff;
  // A batch's run of consecutive requests sharing one forward.
  struct Pack {
    size_t first = 0;
    int count = 0, tokens = 0, Tp = 0;  // Tp: the rows run (a bucket, or pack_rows)
    bool media = false;                 // one request with images or videos (count 1)
    std::vector<int> lengths;
    PackTables tables;       // count > 1
    int32_t* ids = nullptr;  // its Tp padded ids in ids_pinned_, then its tables
  };
  struct Flight {
    Ticket ticket = 0;
    std::vector<const encoding::EncodedRequest*> batch;
    std::vector<Pack> packs;
    size_t launched = 0;  // packs whose backbone is enqueued
    bool head_enqueued = false;
    cudaEvent_t done = nullptr;  // after the last pack's backbone (one of done_events_)
    std::exception_ptr error;
  };
  std::deque<Flight> flights_;                       // open batches, oldest first (at most two)
  cudaEvent_t done_events_[2] = {nullptr, nullptr};  // by ticket parity
  Ticket next_ticket_ = 1;
};

}  // namespace clef::engine::cuda

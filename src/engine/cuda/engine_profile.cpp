// CudaEngineImpl's diagnostics (CudaEngine): stage times of one eager forward, the GEMM floor, the
// backbone's replay time, hidden-state dumps and the cold-work counters.
#include <algorithm>
#include <stdexcept>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/engine_impl.h"
#include "engine/cuda/packing.h"
#include "engine/cuda/profile.h"
#include "engine/prepare/token_buckets.h"
#include "model/bf16.h"

namespace clef::engine::cuda {

ColdWork CudaEngineImpl::cold_work() const {
  ColdWork c;
  c.graphs_captured = graphs_.captured();
  c.gemm_plans = gemm_.tuned_shapes();
  c.head_allocations = head_->allocations();
  c.workspace_growths = workspace_->growths();
  return c;
}

StageTimes CudaEngineImpl::forward_profiled(const encoding::EncodedRequest& req) {
  require_no_flight("forward_profiled");
  use_device();
  StageRecorder rec(stream_);
  if (req.has_media()) {
    run_media(req, &rec);
  } else {
    run_backbone(req.input_ids, &rec);
  }
  // The head is enqueued while the backbone still runs (as in forward) and synchronises at its
  // end, so this last interval is what the head adds to a request: its device time, the logits'
  // copy and the host's wake-up.
  run_head(req, [&rec](const char* kind) { rec.mark(kind); });
  rec.mark("head");
  return rec.collect();
}

StageTimes CudaEngineImpl::forward_profiled(
    const std::vector<const encoding::EncodedRequest*>& batch) {
  if (batch.size() == 1 && batch[0]) return forward_profiled(*batch[0]);
  require_no_flight("forward_profiled");
  use_device();
  std::vector<const std::vector<int32_t>*> seqs;
  for (const auto* req : batch) {
    if (!req || req->has_media())
      throw std::runtime_error("forward_profiled: a packed batch holds text requests only");
    seqs.push_back(&req->input_ids);
  }
  const int n = static_cast<int>(batch.size());
  int Tp = 0;
  // Before the first event: outside the timed stages.
  const PackView view = stage_pack(seqs, "forward_profiled", Tp);
  const Activations& a = workspace_->buffers();
  head_->begin(batch, stream_, {n});
  StageRecorder rec(stream_);
  backbone_->enqueue(a, Tp, stream_, &rec, &view);
  // As in forward: the group's head, then its one wait (the last interval: device time, the
  // logits' copy and the host's wake-up).
  head_->enqueue(a.final_hidden, stream_, [&rec](const char* kind) { rec.mark(kind); });
  (void)head_->finish(stream_);
  rec.mark("head");
  return rec.collect();
}

PackView CudaEngineImpl::stage_pack(const std::vector<const std::vector<int32_t>*>& seqs,
                                    const char* what, int& Tp) {
  std::vector<int> lengths;
  int T = 0;
  for (const auto* sq : seqs) {
    check_ids(*sq);
    lengths.push_back(static_cast<int>(sq->size()));
    T += lengths.back();
  }
  const int n = static_cast<int>(seqs.size());
  if (n < 2 || n > kMaxPackedSequences || T > pack_tokens_)
    throw std::runtime_error(std::string(what) + ": the batch is not one pack");
  Tp = bucket_tokens(T);
  const PackTables t = pack_tables(lengths, Tp, sequence_bucket(n), rows_per_tile(Tp));
  int32_t* pinned = pinned_staging(static_cast<size_t>(Tp) + table_ints(t));
  int32_t* at = pinned;
  for (const auto* sq : seqs) at = std::copy(sq->begin(), sq->end(), at);
  std::fill(at, pinned + Tp, 0);
  return upload_pack(pinned, t, pinned + Tp);
}

double CudaEngineImpl::gemm_floor_ms(int T, int runs) {
  use_device();
  if (T <= 0) throw std::runtime_error("gemm_floor_ms: T must be positive");
  reserve(bucket_tokens(T));
  const Activations& a = workspace_->buffers();
  // The FP8 GEMM needs M a multiple of 4 (gemm.h): its floor runs the rows rounded up to that
  // (every bucket already is), all in FP8 (T is not a bucket with measured choices).
  const int Tg = config_.weights == DataType::F8_E4M3 ? (T + 3) / 4 * 4 : T;
  backbone_->enqueue_gemms_only(a, Tg, stream_);  // chooses every shape outside the capture
  CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  GraphCache once(1);
  cudaGraphExec_t ge = once.capture(GraphKey{Tg, 1, config_.weights}, stream_,
                                    [&] { backbone_->enqueue_gemms_only(a, Tg, stream_); });
  for (int i = 0; i < 3; ++i) CLEF_CUDA_CHECK(cudaGraphLaunch(ge, stream_));
  return median_ms(stream_, runs, [&] { CLEF_CUDA_CHECK(cudaGraphLaunch(ge, stream_)); });
}

double CudaEngineImpl::backbone_ms(const std::vector<int32_t>& ids, int runs) {
  use_device();
  run_backbone(ids, nullptr);  // captures the bucket's graph if it is new
  return median_ms(stream_, runs, [&] { run_backbone(ids, nullptr); });
}

std::vector<float> CudaEngineImpl::last_hidden_state(const std::vector<int32_t>& ids) {
  use_device();
  run_backbone(ids, nullptr);
  return hidden_host(static_cast<int>(ids.size()));
}

std::vector<float> CudaEngineImpl::packed_hidden_state(
    const std::vector<std::vector<int32_t>>& seqs, int layers) {
  require_no_flight("packed_hidden_state");
  use_device();
  int T = 0;
  for (const auto& sq : seqs) T += static_cast<int>(sq.size());
  if (seqs.size() == 1) {  // as a request alone: no tables
    run_backbone(seqs[0], nullptr, layers);
  } else {
    std::vector<const std::vector<int32_t>*> ptrs;
    for (const auto& sq : seqs) ptrs.push_back(&sq);
    int Tp = 0;
    const PackView view = stage_pack(ptrs, "packed_hidden_state", Tp);
    backbone_->enqueue(workspace_->buffers(), Tp, stream_, nullptr, &view, nullptr, layers);
  }
  return hidden_host(T);
}

std::vector<float> CudaEngineImpl::last_hidden_state(const encoding::EncodedRequest& req,
                                                     std::vector<float>* vision_rows) {
  use_device();
  if (!req.has_media()) {
    if (vision_rows) vision_rows->clear();
    return last_hidden_state(req.input_ids);
  }
  run_media(req, nullptr);
  std::vector<float> h = hidden_host(static_cast<int>(req.input_ids.size()));
  if (vision_rows) {  // the tower's rows are still in its workspace (nothing ran it since)
    const size_t n = static_cast<size_t>(vision_->tokens()) * vision_->out_width();
    vision_rows->assign(n, 0.0f);
    const void* rows = vision_->last_rows();
    if (config_.activations == DataType::F32) {
      CLEF_CUDA_CHECK(cudaMemcpy(vision_rows->data(), rows, n * 4, cudaMemcpyDeviceToHost));
    } else {
      std::vector<uint16_t> raw(n);
      CLEF_CUDA_CHECK(cudaMemcpy(raw.data(), rows, n * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < n; ++i) (*vision_rows)[i] = model::bf16_to_float(raw[i]);
    }
  }
  return h;
}

double CudaEngineImpl::vision_gemm_floor_ms(const media::VisualInput& visual, int runs) {
  use_device();
  if (!vision_) throw std::runtime_error("vision_gemm_floor_ms: this model has no vision tower");
  vision_->enqueue_gemms_only(visual, stream_);  // chooses every shape, grows the workspace
  CLEF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return median_ms(stream_, runs, [&] { vision_->enqueue_gemms_only(visual, stream_); });
}

}  // namespace clef::engine::cuda

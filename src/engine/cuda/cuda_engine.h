// The CUDA backend: bf16 production path and a float32 parity path behind the Engine
// interface. Plain C++ header (no CUDA types) so create_engine.cpp and the CLI can include it
// without nvcc.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace clef::engine::cuda {

// Milliseconds of device time per stage of one forward pass, measured with CUDA events (eager run).
struct StageTimes {
  std::map<std::string, double> ms;  // "gemm", "gdn_core", "attention", "norms_elementwise", "head"
  double total_ms = 0;               // device time from the first to the last event
};

// One-time work done so far; after prepare() no admitted request may add to it.
struct ColdWork {
  size_t graphs_captured = 0;
  size_t gemm_plans = 0;        // backbone GEMM shapes chosen
  size_t head_allocations = 0;  // head scratch / staging (re)allocations
  size_t workspace_growths = 0;
};

// The CUDA engine's diagnostics, used by `clefserve profile` and the GPU tests.
class CudaEngine : public Engine {
 public:
  virtual ColdWork cold_work() const = 0;
  // One forward of a single request, eagerly, with events between stages.
  virtual StageTimes forward_profiled(const encoding::EncodedRequest& req) = 0;
  // One packed forward of several text requests (one pack: at most the packed rows and sequences
  // a forward takes), eagerly, with events between stages; its head once for the group.
  virtual StageTimes forward_profiled(
      const std::vector<const encoding::EncodedRequest*>& batch) = 0;
  // Median time (ms) of all the backbone's linear layers at T tokens, as this engine fuses them,
  // through cuBLASLt with the best timed algorithm per shape, replayed from a CUDA graph.
  virtual double gemm_floor_ms(int T, int runs) = 0;
  // Median device time (ms) of the backbone alone for these ids as a request runs it (the bucket's
  // CUDA graph, captured first if needed), timed with events over `runs` replays.
  virtual double backbone_ms(const std::vector<int32_t>& ids, int runs) = 0;
  // The backbone's last_hidden_state (after the final norm) for these ids, [T, hidden] as float.
  virtual std::vector<float> last_hidden_state(const std::vector<int32_t>& ids) = 0;
  // Batch-invariance diagnostics: the hidden rows after the first `layers` decoder layers (-1:
  // all) and the final norm, [sum of lengths, hidden] as float, for these token sequences packed
  // into one forward (one sequence: run as a request alone).
  virtual std::vector<float> packed_hidden_state(const std::vector<std::vector<int32_t>>& seqs,
                                                 int layers) = 0;
  // The same for a request (with images or videos: the tower, merged rows and 3-D positions);
  // `vision_rows` (optional) receives the tower's output [tokens, hidden] as float.
  virtual std::vector<float> last_hidden_state(const encoding::EncodedRequest& req,
                                               std::vector<float>* vision_rows) = 0;
  // Median time (ms) of every GEMM of the vision tower for these grids (its GEMM floor), eager.
  virtual double vision_gemm_floor_ms(const media::VisualInput& visual, int runs) = 0;
};

// CUDA devices this process can use (0 when none is, whatever the reason).
int device_count();

// Throws std::runtime_error with one clear line when no CUDA device is usable, the device
// (opts.device_index) does not exist, or an option is invalid.
std::unique_ptr<Engine> make_cuda_engine(std::shared_ptr<const model::Release> release,
                                         const EngineOptions& opts);

}  // namespace clef::engine::cuda

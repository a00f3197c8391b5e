// Consecutive batches through one engine with their device work overlapped: the server's worker
// (one thread per engine) begins batch k+1 as soon as the device has finished batch k's main
// work, then ends batch k (the CUDA engine runs k's joint head beside k+1's backbone). Batch
// k+1 still takes everything queued while batch k ran: a batch is begun only after
// await_device() of the one before it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "encoding/encode.h"
#include "engine/engine.h"

namespace clef::engine {

class ForwardPipeline {
 public:
  using Ticket = uint64_t;
  virtual ~ForwardPipeline() = default;
  // Validates the whole batch (throwing before anything is enqueued), enqueues its work and
  // returns at once. At most two tickets are open; the requests must outlive end().
  virtual Ticket begin(const std::vector<const encoding::EncodedRequest*>& batch) = 0;
  // Returns once the device could start the next batch's main work (this batch's remaining
  // work, e.g. its head, may still run). Tickets are awaited and ended in begin order.
  virtual void await_device(Ticket t) = 0;
  // The batch's outputs, in batch order (what forward() returns); rethrows its error.
  virtual std::vector<ForwardOutput> end(Ticket t) = 0;
};

// For an engine without its own pipeline (Engine::native_pipeline null): one over forward(),
// run inside await_device(), so the next batch is still taken only after it. `engine` must
// outlive the pipeline.
std::unique_ptr<ForwardPipeline> serial_pipeline(Engine& engine);

}  // namespace clef::engine

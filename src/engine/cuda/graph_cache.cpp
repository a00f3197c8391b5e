#include "engine/cuda/graph_cache.h"

#include <algorithm>

#include "engine/cuda/cuda_check.h"

namespace clef::engine::cuda {

cudaGraphExec_t GraphCache::find(const GraphKey& key) {
  auto it =
      std::find_if(graphs_.begin(), graphs_.end(), [&](const auto& p) { return p.first == key; });
  if (it == graphs_.end()) return nullptr;
  graphs_.splice(graphs_.begin(), graphs_, it);
  return graphs_.front().second;
}

cudaGraphExec_t GraphCache::capture(const GraphKey& key, cudaStream_t s,
                                    const std::function<void()>& enqueue) {
  cudaGraph_t g = nullptr;
  CLEF_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(s, &g);
    if (g) cudaGraphDestroy(g);
    throw;
  }
  CLEF_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&ge, g, 0);
  cudaGraphDestroy(g);
  CLEF_CUDA_CHECK(e);
  CLEF_CUDA_CHECK(cudaGraphUpload(ge, s));
  ++captured_;
  graphs_.emplace_front(key, ge);
  while (graphs_.size() > limit_) {
    cudaGraphExecDestroy(graphs_.back().second);
    graphs_.pop_back();
  }
  return ge;
}

void GraphCache::clear() {
  for (auto& [k, ge] : graphs_) cudaGraphExecDestroy(ge);
  graphs_.clear();
}

}  // namespace clef::engine::cuda

// SIMT path of the chunked gated delta rule (fp32 FMA on the CUDA cores, any E): the parallel prep
// kernel over (chunk, value head) and the sequential scan over chunks described in gdn/gdn.h.
// gdn_chunked() dispatches here (always for float, for bf16 when the tensor-core path is not
// supported or KernelPath::Generic is asked for).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "engine/cuda/gdn/gdn.h"

namespace clef::engine::cuda::gdn {

// Floats of scratch for Tc (= T rounded up to 64) rows: W, U, P and gamma.
size_t simt_workspace_floats(int Tc, int Hv, int dk, int dv);

// Same contract as gdn_chunked() (gdn/gdn.h), shapes already checked by it.
template <typename E>
void chunked_simt(const float* q, const float* k, const float* v, const float* g, const float* beta,
                  int T, int Hk, int Hv, int dk, int dv, E* o, float* workspace, cudaStream_t s,
                  cudaEvent_t between, cudaEvent_t after_scan, const GdnSequences* seqs);

}  // namespace clef::engine::cuda::gdn

// The chunked gated delta rule (docs/spec/gpu.md §4, chunk 64, fp32 state), the GPU form of the
// exact sequential recurrence in docs/spec/model.md §3. The bf16 engine runs the tensor-core path
// of gdn/tensor_core.h where the head dims and the device allow it; otherwise (always in the
// float32 parity engine, and with KernelPath::Generic) the SIMT kernels of gdn/simt.h: a parallel
// one over (chunk, value head) that builds the UT transform Tm = (I + A)^-1 and
// W = Tm diag(beta e^gamma) K, U = Tm diag(beta) V, P = (Q K^T) o Gamma; then the only sequential
// kernel, over chunks, with the value columns split across CTAs so that a batch-1 prefill fills
// the GPU. Only non-positive log-decay differences are ever exponentiated.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "engine/cuda/kernel_path.h"

namespace clef::engine::cuda {

constexpr int kGdnChunk = 64;

// Scratch for either path (the larger of the two), fp32; SIMT: W [Hv, Tc, dk], U [Hv, Tc, dv],
// P [Hv, Tc, 64], gamma [Hv, Tc], Tc = T rounded up to 64.
size_t gdn_workspace_bytes(int T, int Hv, int dk, int dv);

// q, k: [T, Hk, dk] fp32 (q l2-normalised and scaled, k l2-normalised); v: [T, Hv, dv]; g, beta:
// [T, Hv]. o: [T, Hv, dv] in E. Value head h reads key head h / (Hv / Hk). dk, dv <= 128.
// `between` and `after_scan` (optional, profiling) are recorded on s after the parallel prep kernel
// and after the sequential scan.
template <typename E>
void gdn_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int T, int Hk, int Hv, int dk, int dv, E* o, void* workspace, KernelPath path,
                 cudaStream_t s, cudaEvent_t between = nullptr, cudaEvent_t after_scan = nullptr);

// The path gdn_chunked runs for these head dims on the current device: "gdn_tensor_core" (bf16,
// KernelPath::Auto, gdn::tc_supported) or "gdn_simt".
const char* gdn_chunked_variant(int dk, int dv, bool bf16, KernelPath path);

}  // namespace clef::engine::cuda

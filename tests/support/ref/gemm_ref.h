// CPU reference of the backbone GEMM (engine/cuda/gemm.h): y[m, n] (+)= sum_k x[m, k] w[n, k] in
// double, rounded once to fp32. Test-only (clef_engine_ref).
#pragma once

namespace clef::engine::ref {

// x [M, ldx], w [N, K] (row n = output column n), y [M, ldy]: columns n < N of each row are
// replaced (accumulate = false) or added to (accumulate = true); columns >= N are left alone.
void gemm_ref(const float* x, int ldx, const float* w, float* y, int ldy, int M, int N, int K,
              bool accumulate);

}  // namespace clef::engine::ref

// CPU references of the GEMM module (engine/cuda/gemm/gemm.h): y[m, n] (+)= sum_k x[m, k] w[n, k] in
// double, rounded once to fp32. Test-only (clef_engine_ref).
#pragma once

namespace clef::engine::ref {

// x [M, ldx], w [N, K] (row n = output column n), y [M, ldy]: columns n < N of each row are
// replaced (accumulate = false) or added to (accumulate = true); columns >= N are left alone.
void gemm_ref(const float* x, int ldx, const float* w, float* y, int ldy, int M, int N, int K,
              bool accumulate);

// The general form (strided batches, B stored [N, K] when b_is_nk else [K, N]): for batch bt,
// C_bt[m, n] (+)= sum_k A_bt[m, k] B_bt(k, n), A_bt = a + bt * a_bs with rows of lda, B_bt = b + bt *
// b_bs with rows of ldb, C_bt = c + bt * c_bs with rows of ldc; double sums rounded once to fp32.
void gemm_batched_ref(const float* a, int lda, long a_bs, const float* b, int ldb, long b_bs,
                      bool b_is_nk, float* c, int ldc, long c_bs, int M, int N, int K, int batch,
                      bool accumulate);

}  // namespace clef::engine::ref

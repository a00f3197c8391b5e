// Double-precision GEMM reference (see gemm_ref.h).
#include "support/ref/gemm_ref.h"

#include <cstddef>

namespace clef::engine::ref {

void gemm_ref(const float* x, int ldx, const float* w, float* y, int ldy, int M, int N, int K,
              bool accumulate) {
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = accumulate ? y[static_cast<size_t>(m) * ldy + n] : 0.0;
      for (int kk = 0; kk < K; ++kk)
        s += double(x[static_cast<size_t>(m) * ldx + kk]) * w[static_cast<size_t>(n) * K + kk];
      y[static_cast<size_t>(m) * ldy + n] = float(s);
    }
}

void gemm_batched_ref(const float* a, int lda, long a_bs, const float* b, int ldb, long b_bs,
                      bool b_is_nk, float* c, int ldc, long c_bs, int M, int N, int K, int batch,
                      bool accumulate) {
  for (int bt = 0; bt < batch; ++bt)
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        float& out = c[bt * c_bs + static_cast<long>(m) * ldc + n];
        double s = accumulate ? out : 0.0;
        for (int k = 0; k < K; ++k) {
          const double x = a[bt * a_bs + static_cast<long>(m) * lda + k];
          const double w = b_is_nk ? b[bt * b_bs + static_cast<long>(n) * ldb + k]
                                   : b[bt * b_bs + static_cast<long>(k) * ldb + n];
          s += x * w;
        }
        out = float(s);
      }
}

}  // namespace clef::engine::ref

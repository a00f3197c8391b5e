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

}  // namespace clef::engine::ref

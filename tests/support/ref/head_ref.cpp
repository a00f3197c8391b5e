#include "support/ref/head_ref.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace clef::engine::ref {

std::vector<double> head_attention_ref(const std::vector<float>& q, const std::vector<float>& kv,
                                       const std::vector<int>& nq, const std::vector<int>& k0,
                                       const std::vector<int>& nk, int heads, int hd) {
  const size_t W = static_cast<size_t>(heads) * hd;
  size_t total = 0;
  for (int n : nq) total += static_cast<size_t>(n);
  std::vector<double> out(total * W);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  size_t i0 = 0;
  for (size_t r = 0; r < nq.size(); i0 += static_cast<size_t>(nq[r]), ++r)
    for (int i = 0; i < nq[r]; ++i)
      for (int h = 0; h < heads; ++h) {
        const float* qi = &q[(i0 + i) * W + static_cast<size_t>(h) * hd];
        std::vector<double> sc(static_cast<size_t>(nk[r]));
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < nk[r]; ++j) {
          const float* kj =
              &kv[static_cast<size_t>(k0[r] + j) * 2 * W + static_cast<size_t>(h) * hd];
          double d = 0;
          for (int e = 0; e < hd; ++e) d += static_cast<double>(qi[e]) * kj[e];
          sc[j] = d * scale;
          mx = std::max(mx, sc[j]);
        }
        for (double& v : sc) sum += (v = std::exp(v - mx));
        for (int e = 0; e < hd; ++e) {
          double a = 0;
          for (int j = 0; j < nk[r]; ++j)
            a += sc[j] *
                 kv[static_cast<size_t>(k0[r] + j) * 2 * W + W + static_cast<size_t>(h) * hd + e];
          out[(i0 + i) * W + static_cast<size_t>(h) * hd + e] = a / sum;
        }
      }
  return out;
}

}  // namespace clef::engine::ref

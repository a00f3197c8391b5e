// Causal GQA attention reference (see attention_ref.h).
#include "support/ref/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace clef::engine::ref {

void attention_ref(const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, int T, int nh, int nkv, int hd,
                   const std::vector<int>& rows, std::vector<double>& out) {
  out.assign(static_cast<size_t>(T) * nh * hd, 0.0);
  const int group = nh / nkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> s(T);
  auto one = [&](int t) {
    for (int h = 0; h < nh; ++h) {
      const int kh = h / group;
      const float* qr = &q[(static_cast<size_t>(t) * nh + h) * hd];
      double mx = -INFINITY;
      for (int j = 0; j <= t; ++j) {
        const float* kr = &k[(static_cast<size_t>(j) * nkv + kh) * hd];
        double d = 0;
        for (int e = 0; e < hd; ++e) d += static_cast<double>(qr[e]) * kr[e];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
      double* o = &out[(static_cast<size_t>(t) * nh + h) * hd];
      for (int j = 0; j <= t; ++j) {
        const float* vr = &v[(static_cast<size_t>(j) * nkv + kh) * hd];
        for (int e = 0; e < hd; ++e) o[e] += s[j] / sum * vr[e];
      }
    }
  };
  if (rows.empty())
    for (int t = 0; t < T; ++t) one(t);
  else
    for (int t : rows) one(t);
}

}  // namespace clef::engine::ref

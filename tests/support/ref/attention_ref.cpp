// Attention references (see attention_ref.h).
#include "support/ref/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <thread>

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

void segment_attention_ref(const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, const std::vector<int>& lengths, int nh,
                           int hd, double scale, bool causal, const std::vector<int>& rows,
                           std::vector<double>& out) {
  std::vector<int> seg_begin, seg_of;  // first row of each segment; each row's segment
  int T = 0;
  for (int len : lengths) {
    seg_begin.push_back(T);
    seg_of.insert(seg_of.end(), len, static_cast<int>(seg_begin.size()) - 1);
    T += len;
  }
  const size_t n = static_cast<size_t>(T) * nh * hd;
  if (q.size() != n || k.size() != n || v.size() != n)
    throw std::invalid_argument("segment_attention_ref: q/k/v are not [sum(lengths), nh, hd]");
  out.assign(n, 0.0);
  std::vector<int> todo = rows;
  if (todo.empty())
    for (int t = 0; t < T; ++t) todo.push_back(t);
  const size_t row_w = static_cast<size_t>(nh) * hd;
  // One query row, all heads; keys visited in row order so each k / v row is read contiguously
  // (a 4096-row segment is ~40 MB of k and v per query row). s: [nh][T] scratch.
  auto one = [&](int t, std::vector<double>& s) {
    const int b = seg_begin[seg_of[t]];
    const int e = causal ? t + 1 : b + lengths[seg_of[t]];  // keys [b, e)
    const float* qr = &q[t * row_w];
    for (int j = b; j < e; ++j) {
      const float* kr = &k[j * row_w];
      for (int h = 0; h < nh; ++h) {
        double d = 0;
        for (int c = 0; c < hd; ++c) d += static_cast<double>(qr[h * hd + c]) * kr[h * hd + c];
        s[static_cast<size_t>(h) * T + j] = d * scale;
      }
    }
    std::vector<double> inv_sum(nh);
    for (int h = 0; h < nh; ++h) {
      double* sh = &s[static_cast<size_t>(h) * T];
      double mx = -INFINITY, sum = 0;
      for (int j = b; j < e; ++j) mx = std::max(mx, sh[j]);
      for (int j = b; j < e; ++j) sum += (sh[j] = std::exp(sh[j] - mx));
      inv_sum[h] = 1.0 / sum;
    }
    double* o = &out[t * row_w];
    for (int j = b; j < e; ++j) {
      const float* vr = &v[j * row_w];
      for (int h = 0; h < nh; ++h) {
        const double w = s[static_cast<size_t>(h) * T + j] * inv_sum[h];
        for (int c = 0; c < hd; ++c) o[h * hd + c] += w * vr[h * hd + c];
      }
    }
  };
  // Rows are independent and write disjoint outputs: split them over the host's cores (each row's
  // arithmetic, and so the result, does not depend on the split).
  const int workers = static_cast<int>(std::clamp<size_t>(
      std::min<size_t>(std::thread::hardware_concurrency(), todo.size()), 1, 64));
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      std::vector<double> s(static_cast<size_t>(nh) * T);
      for (size_t i = w; i < todo.size(); i += workers) one(todo[i], s);
    });
  for (auto& th : pool) th.join();
}

}  // namespace clef::engine::ref

#include "media/resize.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace clef::media {
namespace {

// Keys' cubic convolution, a = -0.5 (torch's aa bicubic filter).
double keys_cubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

// One axis' taps: for output i, input range [xmin, xmin + xsize) and int16 weights at `taps` per
// output; `precision` is the fixed-point shift.
struct Taps {
  int taps = 0;
  unsigned precision = 0;
  std::vector<int> xmin, xsize;
  std::vector<int16_t> weights;  // [out][taps]
};

Taps compute_taps(int in, int out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  Taps t;
  t.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.xmin.resize(out);
  t.xsize.resize(out);
  std::vector<double> w(static_cast<size_t>(out) * t.taps, 0.0);
  double wt_max = 0.0;
  for (int i = 0; i < out; ++i) {
    const double center = scale * (i + 0.5);
    const int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    int64_t xsize = std::min(static_cast<int64_t>(center + support + 0.5), int64_t{in}) - xmin;
    // Rounding can make xsize one over the tap count: torch clips it.
    xsize = std::clamp(xsize, int64_t{0}, static_cast<int64_t>(t.taps));
    double* wi = w.data() + static_cast<size_t>(i) * t.taps;
    double total = 0.0;
    for (int64_t j = 0; j < xsize; ++j) {
      wi[j] = keys_cubic((static_cast<double>(j + xmin) - center + 0.5) * invscale);
      total += wi[j];
    }
    if (total != 0.0)
      for (int64_t j = 0; j < xsize; ++j) wi[j] /= total;
    for (int64_t j = 0; j < xsize; ++j) wt_max = std::max(wt_max, wi[j]);
    t.xmin[i] = static_cast<int>(xmin);
    t.xsize[i] = static_cast<int>(xsize);
  }
  for (t.precision = 0; t.precision < 22; ++t.precision) {
    const int next = static_cast<int>(0.5 + wt_max * (1 << (t.precision + 1)));
    if (next >= (1 << 15)) break;
  }
  t.weights.resize(w.size());
  for (size_t k = 0; k < w.size(); ++k) {
    const double v = w[k] * (1 << t.precision);
    t.weights[k] =
        static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return t;
}

uint8_t clamp_shift(int32_t acc, unsigned precision) {
  const int32_t v = acc >> precision;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Resizes along x: rows h, in_w -> out_w.
std::vector<uint8_t> horizontal(const uint8_t* src, int h, int in_w, int out_w) {
  const Taps t = compute_taps(in_w, out_w);
  std::vector<uint8_t> dst(static_cast<size_t>(h) * out_w * 3);
  const int32_t init = t.precision > 0 ? int32_t{1} << (t.precision - 1) : 0;
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = src + static_cast<size_t>(y) * in_w * 3;
    uint8_t* o = dst.data() + static_cast<size_t>(y) * out_w * 3;
    for (int x = 0; x < out_w; ++x) {
      const int16_t* wk = t.weights.data() + static_cast<size_t>(x) * t.taps;
      for (int c = 0; c < 3; ++c) {
        int32_t acc = init;
        for (int j = 0; j < t.xsize[x]; ++j)
          acc += static_cast<int32_t>(row[(static_cast<size_t>(t.xmin[x]) + j) * 3 + c]) * wk[j];
        o[static_cast<size_t>(x) * 3 + c] = clamp_shift(acc, t.precision);
      }
    }
  }
  return dst;
}

// Resizes along y: in_h -> out_h rows of w pixels.
std::vector<uint8_t> vertical(const uint8_t* src, int in_h, int w, int out_h) {
  const Taps t = compute_taps(in_h, out_h);
  const size_t stride = static_cast<size_t>(w) * 3;
  std::vector<uint8_t> dst(static_cast<size_t>(out_h) * stride);
  const int32_t init = t.precision > 0 ? int32_t{1} << (t.precision - 1) : 0;
  for (int y = 0; y < out_h; ++y) {
    const int16_t* wk = t.weights.data() + static_cast<size_t>(y) * t.taps;
    uint8_t* o = dst.data() + static_cast<size_t>(y) * stride;
    for (size_t k = 0; k < stride; ++k) {
      int32_t acc = init;
      for (int j = 0; j < t.xsize[y]; ++j)
        acc += static_cast<int32_t>(src[(static_cast<size_t>(t.xmin[y]) + j) * stride + k]) * wk[j];
      o[k] = clamp_shift(acc, t.precision);
    }
  }
  return dst;
}

}  // namespace

std::vector<uint8_t> resize_bicubic_aa(const uint8_t* src, int in_h, int in_w, int out_h,
                                       int out_w) {
  std::vector<uint8_t> cur;
  const uint8_t* p = src;
  if (in_w != out_w) {
    cur = horizontal(p, in_h, in_w, out_w);
    p = cur.data();
  }
  if (in_h != out_h) return vertical(p, in_h, out_w, out_h);
  if (p == src) return std::vector<uint8_t>(src, src + static_cast<size_t>(in_h) * in_w * 3);
  return cur;
}

}  // namespace clef::media

#include "media/resize.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "media/parallel.h"

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

// Rows per parallel work item: rows are independent (each output value is the same integer sum
// whichever thread computes it), so the bands only share the work.
constexpr int kBandRows = 16;

size_t bands(int rows) {
  return static_cast<size_t>((rows + kBandRows - 1) / kBandRows);
}

// Resizes along x: rows h, in_w -> out_w. The three channels of a pixel share one pass over its
// taps.
void horizontal(const uint8_t* src, int h, int in_w, int out_w, uint8_t* dst) {
  const Taps t = compute_taps(in_w, out_w);
  const int32_t init = t.precision > 0 ? int32_t{1} << (t.precision - 1) : 0;
  parallel_items(bands(h), [&](size_t band) {
    const int y1 = std::min(h, static_cast<int>(band + 1) * kBandRows);
    for (int y = static_cast<int>(band) * kBandRows; y < y1; ++y) {
      const uint8_t* row = src + static_cast<size_t>(y) * in_w * 3;
      uint8_t* o = dst + static_cast<size_t>(y) * out_w * 3;
      for (int x = 0; x < out_w; ++x) {
        const int16_t* wk = t.weights.data() + static_cast<size_t>(x) * t.taps;
        const uint8_t* px = row + static_cast<size_t>(t.xmin[x]) * 3;
        int32_t r = init, g = init, b = init;
        for (int j = 0; j < t.xsize[x]; ++j, px += 3) {
          r += static_cast<int32_t>(px[0]) * wk[j];
          g += static_cast<int32_t>(px[1]) * wk[j];
          b += static_cast<int32_t>(px[2]) * wk[j];
        }
        o[static_cast<size_t>(x) * 3] = clamp_shift(r, t.precision);
        o[static_cast<size_t>(x) * 3 + 1] = clamp_shift(g, t.precision);
        o[static_cast<size_t>(x) * 3 + 2] = clamp_shift(b, t.precision);
      }
    }
  });
}

// Resizes along y: in_h -> out_h rows of w pixels. Each output row accumulates its input rows one
// whole row at a time (contiguous, vectorisable) into an int32 row.
void vertical(const uint8_t* src, int in_h, int w, int out_h, uint8_t* dst) {
  const Taps t = compute_taps(in_h, out_h);
  const size_t stride = static_cast<size_t>(w) * 3;
  const int32_t init = t.precision > 0 ? int32_t{1} << (t.precision - 1) : 0;
  parallel_items(bands(out_h), [&](size_t band) {
    std::vector<int32_t> acc(stride);
    const int y1 = std::min(out_h, static_cast<int>(band + 1) * kBandRows);
    for (int y = static_cast<int>(band) * kBandRows; y < y1; ++y) {
      const int16_t* wk = t.weights.data() + static_cast<size_t>(y) * t.taps;
      std::fill(acc.begin(), acc.end(), init);
      for (int j = 0; j < t.xsize[y]; ++j) {
        const uint8_t* in = src + (static_cast<size_t>(t.xmin[y]) + j) * stride;
        const int32_t wj = wk[j];
        int32_t* a = acc.data();
        for (size_t k = 0; k < stride; ++k) a[k] += static_cast<int32_t>(in[k]) * wj;
      }
      uint8_t* o = dst + static_cast<size_t>(y) * stride;
      for (size_t k = 0; k < stride; ++k) o[k] = clamp_shift(acc[k], t.precision);
    }
  });
}

}  // namespace

void resize_bicubic_aa_into(const uint8_t* src, int in_h, int in_w, int out_h, int out_w,
                            uint8_t* out) {
  const size_t out_bytes = static_cast<size_t>(out_h) * out_w * 3;
  if (in_w != out_w && in_h != out_h) {
    std::vector<uint8_t> mid(static_cast<size_t>(in_h) * out_w * 3);
    horizontal(src, in_h, in_w, out_w, mid.data());
    vertical(mid.data(), in_h, out_w, out_h, out);
  } else if (in_w != out_w) {
    horizontal(src, in_h, in_w, out_w, out);
  } else if (in_h != out_h) {
    vertical(src, in_h, out_w, out_h, out);
  } else {
    std::memcpy(out, src, out_bytes);
  }
}

std::vector<uint8_t> resize_bicubic_aa(const uint8_t* src, int in_h, int in_w, int out_h,
                                       int out_w) {
  std::vector<uint8_t> out(static_cast<size_t>(out_h) * out_w * 3);
  resize_bicubic_aa_into(src, in_h, in_w, out_h, out_w, out.data());
  return out;
}

}  // namespace clef::media

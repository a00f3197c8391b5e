#include "bench/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

namespace clef::bench {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(double v, double step) {
  // As many decimals as the step needs (0.25 -> 2), so labels are never rounded to a wrong value.
  int digits = 0;
  while (digits < 6) {
    const double scaled = step * std::pow(10.0, digits);
    if (std::fabs(scaled - std::round(scaled)) < 1e-6 * std::max(1.0, scaled)) break;
    ++digits;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

struct Panel {
  double x0, y0, w, h;  // plot area in pixels (y0 = top)
  double xmin, xmax, ymin, ymax;
  double px(double x) const { return x0 + (x - xmin) / (xmax - xmin) * w; }
  double py(double y) const { return y0 + h - (y - ymin) / (ymax - ymin) * h; }
};

void axes(std::ostringstream& o, const Panel& p, const std::vector<double>& xt,
          const std::vector<double>& yt, const std::string& xlabel, const std::string& ylabel,
          const std::string& title) {
  o << "<rect x=\"" << num(p.x0) << "\" y=\"" << num(p.y0) << "\" width=\"" << num(p.w)
    << "\" height=\"" << num(p.h) << "\" fill=\"#fafafa\" stroke=\"#333\"/>\n";
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1.0;
  const double ystep = yt.size() > 1 ? yt[1] - yt[0] : 1.0;
  for (double v : xt) {
    const double x = p.px(v);
    o << "<line x1=\"" << num(x) << "\" y1=\"" << num(p.y0) << "\" x2=\"" << num(x) << "\" y2=\""
      << num(p.y0 + p.h) << "\" stroke=\"#ddd\"/>\n";
    o << "<line x1=\"" << num(x) << "\" y1=\"" << num(p.y0 + p.h) << "\" x2=\"" << num(x)
      << "\" y2=\"" << num(p.y0 + p.h + 5) << "\" stroke=\"#333\"/>\n";
    o << "<text x=\"" << num(x) << "\" y=\"" << num(p.y0 + p.h + 18)
      << "\" text-anchor=\"middle\" font-size=\"11\">" << tick_label(v, xstep) << "</text>\n";
  }
  for (double v : yt) {
    const double y = p.py(v);
    o << "<line x1=\"" << num(p.x0) << "\" y1=\"" << num(y) << "\" x2=\"" << num(p.x0 + p.w)
      << "\" y2=\"" << num(y) << "\" stroke=\"#ddd\"/>\n";
    o << "<line x1=\"" << num(p.x0 - 5) << "\" y1=\"" << num(y) << "\" x2=\"" << num(p.x0)
      << "\" y2=\"" << num(y) << "\" stroke=\"#333\"/>\n";
    o << "<text x=\"" << num(p.x0 - 8) << "\" y=\"" << num(y + 4)
      << "\" text-anchor=\"end\" font-size=\"11\">" << tick_label(v, ystep) << "</text>\n";
  }
  o << "<text x=\"" << num(p.x0 + p.w / 2) << "\" y=\"" << num(p.y0 + p.h + 40)
    << "\" text-anchor=\"middle\" font-size=\"13\">" << esc(xlabel) << "</text>\n";
  o << "<text transform=\"translate(" << num(p.x0 - 52) << "," << num(p.y0 + p.h / 2)
    << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">" << esc(ylabel) << "</text>\n";
  o << "<text x=\"" << num(p.x0 + p.w / 2) << "\" y=\"" << num(p.y0 - 10)
    << "\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">" << esc(title)
    << "</text>\n";
}

// Axis range [0, last tick >= hi].
std::pair<double, std::vector<double>> range_from_zero(double hi) {
  if (!(hi > 0)) hi = 1.0;
  auto ticks = nice_ticks(0.0, hi);
  while (ticks.back() < hi) ticks.push_back(ticks.back() + (ticks[1] - ticks[0]));
  return {ticks.back(), ticks};
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                         "#ff7f0e", "#8c564b", "#e377c2"};

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1.0;
  const double raw = (hi - lo) / std::max(1, target - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> t;
  // Multiples of the step (not a running sum, which would accumulate rounding error).
  const double first = std::floor(lo / step);
  for (double k = first; k * step <= hi + step * 1e-9; k += 1.0) t.push_back(k * step);
  if (t.size() < 2) t.push_back(t.back() + step);
  return t;
}

std::string latency_svg(const std::vector<LatencyPoint>& points, const std::string& title,
                        const std::string& subtitle) {
  const double W = 1100, H = 520;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\" font-family=\"sans-serif\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2
    << "\" y=\"26\" text-anchor=\"middle\" font-size=\"17\" font-weight=\"bold\">" << esc(title)
    << "</text>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"46\" text-anchor=\"middle\" font-size=\"12\" fill=\"#444\">"
    << esc(subtitle) << "</text>\n";
  if (points.empty()) {
    o << "<text x=\"" << W / 2 << "\" y=\"" << H / 2
      << "\" text-anchor=\"middle\" font-size=\"16\">no successful requests: nothing to "
         "plot</text>\n</svg>\n";
    return o.str();
  }
  std::vector<double> lat;
  double max_tokens = 0;
  for (const auto& p : points) {
    lat.push_back(p.latency_ms);
    max_tokens = std::max(max_tokens, p.input_tokens);
  }
  std::sort(lat.begin(), lat.end());
  const auto [lat_top, lat_ticks] = range_from_zero(lat.back());

  // Left: CDF of successful latency.
  Panel cdf{80, 90, 420, 340, 0, lat_top, 0, 1};
  axes(o, cdf, lat_ticks, {0, 0.25, 0.5, 0.75, 1.0}, "latency (ms)",
       "fraction of requests <= latency", "Latency CDF (successful requests)");
  std::ostringstream path;
  path << "M" << num(cdf.px(lat.front())) << "," << num(cdf.py(0));
  for (size_t i = 0; i < lat.size(); ++i) {
    const double f = static_cast<double>(i + 1) / static_cast<double>(lat.size());
    path << " L" << num(cdf.px(lat[i])) << "," << num(cdf.py(static_cast<double>(i) / lat.size()));
    path << " L" << num(cdf.px(lat[i])) << "," << num(cdf.py(f));
  }
  o << "<path d=\"" << path.str() << "\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\n";
  auto rank = [&](double p) {
    size_t r = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(lat.size())));
    return lat[std::clamp<size_t>(r, 1, lat.size()) - 1];
  };
  int k = 0;
  for (double p : {50.0, 95.0}) {
    const double v = rank(p);
    const double x = cdf.px(v);
    o << "<line x1=\"" << num(x) << "\" y1=\"" << num(cdf.y0) << "\" x2=\"" << num(x) << "\" y2=\""
      << num(cdf.y0 + cdf.h) << "\" stroke=\"#d62728\" stroke-dasharray=\"5,4\"/>\n";
    o << "<text x=\"" << num(x + 4) << "\" y=\"" << num(cdf.y0 + 16 + 16 * k++)
      << "\" font-size=\"11\" fill=\"#d62728\">p" << static_cast<int>(p) << " = " << num(v)
      << " ms</text>\n";
  }

  // Right: latency against input tokens, one colour per tier.
  const auto [tok_top, tok_ticks] = range_from_zero(max_tokens);
  Panel sc{620, 90, 420, 340, 0, tok_top, 0, lat_top};
  axes(o, sc, tok_ticks, lat_ticks, "input tokens (usage.input_tokens)", "latency (ms)",
       "Latency vs input tokens");
  std::map<std::string, const char*> colors;
  for (const auto& p : points) {
    if (!colors.count(p.tier)) colors[p.tier] = kColors[colors.size() % std::size(kColors)];
  }
  for (const auto& p : points) {
    if (p.input_tokens < 0) continue;
    o << "<circle cx=\"" << num(sc.px(p.input_tokens)) << "\" cy=\"" << num(sc.py(p.latency_ms))
      << "\" r=\"3\" fill=\"" << colors[p.tier] << "\" fill-opacity=\"0.6\"/>\n";
  }
  double ly = sc.y0 + 12;
  for (const auto& [tier, color] : colors) {
    o << "<circle cx=\"" << num(sc.x0 + 12) << "\" cy=\"" << num(ly) << "\" r=\"4\" fill=\""
      << color << "\"/>\n<text x=\"" << num(sc.x0 + 20) << "\" y=\"" << num(ly + 4)
      << "\" font-size=\"11\">tier " << esc(tier) << "</text>\n";
    ly += 16;
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace clef::bench

#include "study/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::study {

namespace {

constexpr double kWidth = 820, kHeight = 440;
constexpr double kLeft = 70, kRight = 300, kTop = 40, kBottom = 60;  // margins
constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                    "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// About five round tick values covering [low, high].
std::vector<double> Ticks(double low, double high) {
  const double span = high - low;
  if (!(span > 0)) return {low};
  const double raw = span / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  }
  std::vector<double> ticks;
  for (double t = std::ceil(low / step) * step; t <= high + step * 1e-9; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  }
  return ticks;
}

}  // namespace

std::string LineChartSvg(const Chart& chart) {
  double x_low = std::numeric_limits<double>::infinity(), x_high = -x_low;
  double y_low = x_low, y_high = -x_low;
  const auto x_of = [&](double x) { return chart.log2_x ? std::log2(std::max(x, 1e-300)) : x; };
  for (const Series& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      x_low = std::min(x_low, x_of(x));
      x_high = std::max(x_high, x_of(x));
      y_low = std::min(y_low, y);
      y_high = std::max(y_high, y);
    }
  }
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{3}</text>\n",
      kWidth, kHeight, kLeft, Escape(chart.title));
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  if (!std::isfinite(x_low)) {
    return svg + fmt::format("<text x=\"{}\" y=\"{}\">no data</text>\n</svg>\n", kLeft,
                             kTop + plot_h / 2);
  }
  // The y axis starts at zero for values that are all positive, unless the
  // chart asks for the values' own span; a flat range is padded.
  if (chart.y_from_zero && y_low > 0) y_low = 0;
  if (y_high <= y_low) {
    y_low -= 0.5;
    y_high += 0.5;
  }
  const double margin = (y_high - y_low) * 0.05;
  y_high += margin;
  if (!chart.y_from_zero) y_low -= margin;
  if (x_high <= x_low) {
    x_low -= 1;
    x_high += 1;
  }
  const auto px = [&](double x) { return kLeft + (x_of(x) - x_low) / (x_high - x_low) * plot_w; };
  const auto py = [&](double y) { return kTop + plot_h - (y - y_low) / (y_high - y_low) * plot_h; };
  // Axes, ticks and grid.
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", kLeft,
      kTop, plot_w, plot_h);
  for (double t : Ticks(y_low, y_high)) {
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>\n",
        kLeft, kLeft + plot_w, py(t), kLeft - 6, py(t) + 4, t);
  }
  std::vector<double> x_ticks;
  if (chart.log2_x) {
    for (double e = std::ceil(x_low); e <= x_high + 1e-9; ++e) x_ticks.push_back(std::exp2(e));
  } else {
    x_ticks = Ticks(x_low, x_high);
  }
  for (double t : x_ticks) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#ddd\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
        px(t), kTop, kTop + plot_h, kTop + plot_h + 16, t);
  }
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n"
      "<text transform=\"translate(16,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      kLeft + plot_w / 2, kHeight - 18, Escape(chart.x_label), kTop + plot_h / 2,
      Escape(chart.y_label));
  // The series and the legend.
  for (size_t i = 0; i < chart.series.size(); ++i) {
    Series s = chart.series[i];
    std::sort(s.points.begin(), s.points.end());
    const char* colour = kColours[i % std::size(kColours)];
    std::string path;
    for (const auto& [x, y] : s.points) {
      path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", px(x), py(y));
    }
    svg += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", path,
                       colour, s.dashed ? " stroke-dasharray=\"6,4\"" : "");
    for (const auto& [x, y] : s.points) {
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>\n", px(x),
                         py(y), colour);
    }
    const double ly = kTop + 14 + 18 * static_cast<double>(i);
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"2\"{4}/><text x=\"{5}\" y=\"{6:.1f}\">{7}</text>\n",
        kLeft + plot_w + 12, kLeft + plot_w + 36, ly, colour,
        s.dashed ? " stroke-dasharray=\"6,4\"" : "", kLeft + plot_w + 42, ly + 4, Escape(s.name));
  }
  return svg + "</svg>\n";
}

}  // namespace loom::study

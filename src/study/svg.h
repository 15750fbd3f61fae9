// A line chart as an SVG document, for the study's plots. (No plotting
// library in Debian's C++ packages writes SVG without a display stack;
// these charts need axes, ticks, lines, markers and a legend, which is
// what this writes.)
#pragma once

#include <string>
#include <vector>

namespace loom::study {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in x order
  bool dashed = false;
};

struct Chart {
  std::string title, x_label, y_label;
  bool log2_x = false;      // device counts: 8, 16, ... 2048 evenly spaced
  bool y_from_zero = true;  // else the y axis spans the values (ratios near 1)
  std::vector<Series> series;
};

std::string LineChartSvg(const Chart& chart);

}  // namespace loom::study

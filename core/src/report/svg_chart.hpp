// Self-contained SVG charts for the report: line charts (one or more series
// against the step) and a stacked chart (the step-time split).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace rig::report {

struct Line {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (step, value); values may be NaN / inf
  bool dashed = false;
};

struct ChartSpec {
  std::string title;  // the SVG's <title>
  std::string y_label;
  std::string x_label = "step";
  // A log y axis when every value is > 0 and they span 100x or more (loss scale).
  bool log_y = false;
};

struct Chart {
  std::string svg;
  std::size_t not_drawn = 0;  // non-finite values left out of the drawing
};

// Each line in its own colour, broken where a value is not finite, with a
// legend; points are marked when a line has few of them.
Chart line_chart(const ChartSpec& spec, const std::vector<Line>& lines);

// `layers` stacked bottom-up at every step any of them has (a missing or
// non-finite value counts as 0): bars for a few steps, areas for many.
// `total`, when it has points, is drawn as a dashed line over the stack.
Chart stacked_chart(const ChartSpec& spec, const std::vector<Line>& layers, const Line& total);

}  // namespace rig::report

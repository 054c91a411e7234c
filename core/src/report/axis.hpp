// Chart axes: "nice" tick positions (1, 2, 5 x 10^k, or decades on a log
// axis) and their labels.
#pragma once

#include <string>
#include <vector>

namespace rig::report {

struct Axis {
  double lo = 0;  // the axis spans [lo, hi]; for a log axis these are values, not logs
  double hi = 1;
  std::vector<double> ticks;
  double spacing = 1;  // between linear ticks (labels use it to pick their decimals)
  bool log = false;
};

// About `target` ticks over [lo, hi]. `snap` widens the span to whole ticks
// (y axes); `integers` keeps the spacing >= 1 (steps). An empty span is widened.
Axis linear_axis(double lo, double hi, int target, bool snap, bool integers);
// Decades covering [lo, hi] (both > 0), at most about 8 ticks.
Axis log_axis(double lo, double hi);
// A tick label: decimals to match the spacing, k / M / G for large values.
std::string tick_label(const Axis& axis, double value);
// A value for the summary table (5 significant digits, "NaN", "inf").
std::string format_value(double value);

}  // namespace rig::report

#include "report/axis.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace rig::report {

Axis linear_axis(double lo, double hi, int target, bool snap, bool integers) {
  if (!(hi > lo)) {  // one value: give it room above and below
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(target, 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double n = raw / magnitude;
  double spacing = (n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10) * magnitude;
  if (integers) spacing = std::max(spacing, 1.0);
  Axis axis;
  axis.spacing = spacing;
  axis.lo = snap ? std::floor(lo / spacing) * spacing : lo;
  axis.hi = snap ? std::ceil(hi / spacing) * spacing : hi;
  const double eps = spacing * 1e-9;
  for (double k = std::ceil((axis.lo - eps) / spacing); k * spacing <= axis.hi + eps; ++k) {
    const double t = k * spacing;
    axis.ticks.push_back(std::abs(t) < eps ? 0.0 : t);
  }
  return axis;
}

Axis log_axis(double lo, double hi) {
  const double first = std::floor(std::log10(lo));
  double last = std::ceil(std::log10(hi));
  if (last == first) last += 1;
  const double every = std::ceil((last - first) / 8);
  Axis axis;
  axis.log = true;
  axis.lo = std::pow(10.0, first);
  axis.hi = std::pow(10.0, last);
  for (double e = first; e <= last; e += every) axis.ticks.push_back(std::pow(10.0, e));
  return axis;
}

std::string tick_label(const Axis& axis, double value) {
  if (axis.log) return fmt::format("{:g}", value);
  if (value == 0) return "0";
  double largest = 0;
  for (double t : axis.ticks) largest = std::max(largest, std::abs(t));
  if (axis.spacing < 1e-3) return fmt::format("{:.3g}", value);
  double scale = 1;
  const char* suffix = "";
  if (largest >= 1e9) {
    scale = 1e9, suffix = "G";
  } else if (largest >= 1e6) {
    scale = 1e6, suffix = "M";
  } else if (largest >= 1e4) {
    scale = 1e3, suffix = "k";
  }
  const double spacing = axis.spacing / scale;
  const int decimals = spacing >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(spacing) - 1e-9));
  return fmt::format("{:.{}f}{}", value / scale, decimals, suffix);
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return fmt::format("{:.5g}", value);
}

}  // namespace rig::report

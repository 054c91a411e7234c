#include "report/svg_chart.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "report/axis.hpp"
#include "report/html_text.hpp"

namespace rig::report {
namespace {

constexpr double kWidth = 720;
constexpr double kHeight = 300;
constexpr double kLeft = 72;  // room for y tick labels and the y label
constexpr double kRight = 16;
constexpr double kBottom = 44;            // room for x tick labels and the x label
constexpr std::size_t kMarkerLimit = 60;  // mark every point of a line this short
constexpr std::size_t kBarLimit = 60;     // a stack of this few steps is drawn as bars
constexpr std::array<const char*, 8> kColors = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

const char* color(std::size_t i) {
  return kColors[i % kColors.size()];
}

struct LegendEntry {
  std::string label;
  std::string color;
  bool filled = false;  // a swatch for areas and bars, a line otherwise
  bool dashed = false;
};

struct Point {
  double x;
  double y;
};

// Plot area in pixels and the two scales.
struct Frame {
  double left = kLeft, top = 0, right = kWidth - kRight, bottom = kHeight - kBottom;
  Axis x, y;

  double px(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * (right - left); }
  double py(double v) const {
    const double t =
        y.log ? (std::log10(v) - std::log10(y.lo)) / (std::log10(y.hi) - std::log10(y.lo))
              : (v - y.lo) / (y.hi - y.lo);
    return bottom - t * (bottom - top);
  }
};

std::string num(double v) {
  return fmt::format("{:.1f}", v);
}

double label_width(const std::string& label) {
  return 7.0 * static_cast<double>(label.size());
}

// Lays the legend out in rows above the plot; returns the SVG and the plot's top.
std::pair<std::string, double> legend(const std::vector<LegendEntry>& entries) {
  std::string svg;
  double x = kLeft;
  double y = 14;
  for (const auto& e : entries) {
    const double width = 22 + label_width(e.label) + 16;
    if (x + width > kWidth - kRight && x > kLeft) {
      x = kLeft;
      y += 18;
    }
    if (e.filled) {
      svg += fmt::format(R"(<rect x="{}" y="{}" width="14" height="10" fill="{}"/>)", num(x),
                         num(y - 9), e.color);
    } else {
      svg +=
          fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="2"{}/>)",
                      num(x), num(y - 4), num(x + 16), num(y - 4), e.color,
                      e.dashed ? R"( stroke-dasharray="5,3")" : "");
    }
    svg +=
        fmt::format(R"(<text x="{}" y="{}">{}</text>)", num(x + 22), num(y), escape_html(e.label));
    x += width;
  }
  return {svg, y + 14};
}

std::string open_svg(const ChartSpec& spec) {
  return fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {0} {1}" width="{0}" height="{1}" )"
      R"(font-family="sans-serif" font-size="12" role="img"><title>{2}</title>)"
      R"(<rect width="{0}" height="{1}" fill="#ffffff"/>)",
      kWidth, kHeight, escape_html(spec.title));
}

std::string empty_chart(const ChartSpec& spec) {
  return open_svg(spec) + fmt::format(R"(<text x="{}" y="{}" text-anchor="middle" fill="#666">)"
                                      R"(no finite values to draw</text></svg>)",
                                      num(kWidth / 2), num(kHeight / 2));
}

// Grid, ticks, tick labels, axis lines and axis labels.
std::string axes(const ChartSpec& spec, const Frame& f) {
  std::string svg;
  for (double t : f.y.ticks) {
    const double y = f.py(t);
    svg += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#e5e5e5"/>)", num(f.left),
                       num(y), num(f.right), num(y));
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", num(f.left - 6),
                       num(y + 4), tick_label(f.y, t));
  }
  for (double t : f.x.ticks) {
    const double x = f.px(t);
    svg += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#333"/>)", num(x),
                       num(f.bottom), num(x), num(f.bottom + 5));
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{}</text>)", num(x),
                       num(f.bottom + 18), tick_label(f.x, t));
  }
  svg += fmt::format(R"(<path d="M{},{} V{} H{}" fill="none" stroke="#333"/>)", num(f.left),
                     num(f.top), num(f.bottom), num(f.right));
  svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{}</text>)",
                     num((f.left + f.right) / 2), num(kHeight - 6), escape_html(spec.x_label));
  svg += fmt::format(
      R"~(<text transform="translate(14,{}) rotate(-90)" text-anchor="middle">{}</text>)~",
      num((f.top + f.bottom) / 2), escape_html(spec.y_label));
  return svg;
}

// Long runs: keep the first, lowest, highest and last point of every pixel
// column, so the file stays small and the curve's envelope is unchanged.
std::vector<Point> thin(const std::vector<Point>& pts, double plot_width) {
  if (pts.size() <= static_cast<std::size_t>(2 * plot_width)) return pts;
  std::vector<Point> out;
  std::size_t i = 0;
  while (i < pts.size()) {
    const auto column = std::floor(pts[i].x);
    std::size_t j = i;
    std::size_t lo = i, hi = i;
    while (j < pts.size() && std::floor(pts[j].x) == column) {
      if (pts[j].y < pts[lo].y) lo = j;
      if (pts[j].y > pts[hi].y) hi = j;
      ++j;
    }
    std::vector<std::size_t> keep = {i, lo, hi, j - 1};
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    for (std::size_t k : keep) out.push_back(pts[k]);
    i = j;
  }
  return out;
}

std::string polyline(const std::vector<Point>& pts, const std::string& stroke, bool dashed) {
  std::string coords;
  for (const auto& p : pts) coords += fmt::format("{},{} ", num(p.x), num(p.y));
  if (!coords.empty()) coords.pop_back();
  return fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="1.75"{}/>)",
                     coords, stroke, dashed ? R"( stroke-dasharray="5,3")" : "");
}

std::string marker(double x, double y, const std::string& fill, const std::string& tip) {
  return fmt::format(R"(<circle cx="{}" cy="{}" r="2.5" fill="{}"><title>{}</title></circle>)",
                     num(x), num(y), fill, escape_html(tip));
}

std::string tip(const std::string& label, double step, double value) {
  return fmt::format("{}, step {}: {}", label, static_cast<long long>(step), format_value(value));
}

// One line: polylines between non-finite values, markers when short.
std::string draw_line(const Line& line, const Frame& f, const std::string& stroke,
                      std::size_t finite_count) {
  const bool markers = finite_count <= kMarkerLimit;
  std::string svg;
  std::vector<Point> segment;
  auto close_segment = [&] {
    if (segment.size() == 1 && !markers) {
      svg += fmt::format(R"(<circle cx="{}" cy="{}" r="2.5" fill="{}"/>)", num(segment[0].x),
                         num(segment[0].y), stroke);
    } else if (segment.size() > 1) {
      svg += polyline(thin(segment, f.right - f.left), stroke, line.dashed);
    }
    segment.clear();
  };
  for (const auto& [x, y] : line.points) {
    if (!std::isfinite(y) || (f.y.log && y <= 0)) {
      close_segment();
      continue;
    }
    segment.push_back({f.px(x), f.py(y)});
  }
  close_segment();
  if (markers) {
    for (const auto& [x, y] : line.points) {
      if (std::isfinite(y) && !(f.y.log && y <= 0)) {
        svg += marker(f.px(x), f.py(y), stroke, tip(line.label, x, y));
      }
    }
  }
  return svg;
}

}  // namespace

Chart line_chart(const ChartSpec& spec, const std::vector<Line>& lines) {
  Chart chart;
  constexpr double inf = std::numeric_limits<double>::infinity();
  double x0 = inf, x1 = -inf, y0 = inf, y1 = -inf;
  std::vector<std::size_t> finite(lines.size(), 0);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    for (const auto& [x, y] : lines[i].points) {
      if (!std::isfinite(y)) {
        ++chart.not_drawn;
        continue;
      }
      ++finite[i];
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  if (x0 > x1) {
    chart.svg = empty_chart(spec);
    return chart;
  }
  std::vector<LegendEntry> entries;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    entries.push_back({lines[i].label, color(i), false, lines[i].dashed});
  }
  auto [legend_svg, top] = legend(entries);
  Frame f;
  f.top = top;
  f.x = linear_axis(x0, x1, 6, false, true);
  f.y = spec.log_y && y0 > 0 && y1 / y0 >= 100 ? log_axis(y0, y1)
                                               : linear_axis(y0, y1, 5, true, false);
  chart.svg = open_svg(spec) + axes(spec, f);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    chart.svg += draw_line(lines[i], f, color(i), finite[i]);
  }
  chart.svg += legend_svg + "</svg>";
  return chart;
}

Chart stacked_chart(const ChartSpec& spec, const std::vector<Line>& layers, const Line& total) {
  Chart chart;
  // Every step any layer has, and each layer's value there (0 when absent).
  std::map<double, std::vector<double>> by_step;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    for (const auto& [x, y] : layers[i].points) {
      auto& row = by_step[x];
      row.resize(layers.size(), 0.0);
      if (std::isfinite(y)) {
        row[i] = y;
      } else {
        ++chart.not_drawn;
      }
    }
  }
  double y1 = 0;
  for (auto& [x, row] : by_step) {
    row.resize(layers.size(), 0.0);
    double sum = 0;
    for (double v : row) sum += v;
    y1 = std::max(y1, sum);
  }
  for (const auto& [x, y] : total.points) {
    if (std::isfinite(y)) {
      y1 = std::max(y1, y);
    } else {
      ++chart.not_drawn;
    }
  }
  if (by_step.empty()) {
    chart.svg = empty_chart(spec);
    return chart;
  }
  std::vector<double> steps;
  for (const auto& [x, row] : by_step) steps.push_back(x);
  const bool bars = steps.size() <= kBarLimit;
  double gap = 1;  // the smallest distance between steps sets the bar width
  for (std::size_t i = 1; i < steps.size(); ++i) {
    gap = i == 1 ? steps[i] - steps[i - 1] : std::min(gap, steps[i] - steps[i - 1]);
  }
  const double pad = bars ? gap / 2 : 0;

  std::vector<LegendEntry> entries;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    entries.push_back({layers[i].label, color(i), true, false});
  }
  if (!total.points.empty()) entries.push_back({total.label, "#000000", false, true});
  auto [legend_svg, top] = legend(entries);
  Frame f;
  f.top = top;
  f.x = linear_axis(steps.front() - pad, steps.back() + pad, 6, false, true);
  f.y = linear_axis(0, y1 > 0 ? y1 : 1, 5, true, false);
  chart.svg = open_svg(spec) + axes(spec, f);

  if (bars) {
    const double width = std::min(40.0, 0.8 * (f.px(steps.front() + gap) - f.px(steps.front())));
    for (const auto& [x, row] : by_step) {
      double base = 0;
      for (std::size_t i = 0; i < layers.size(); ++i) {
        if (row[i] <= 0) continue;
        const double y_top = f.py(base + row[i]);
        chart.svg += fmt::format(
            R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>)",
            num(f.px(x) - width / 2), num(y_top), num(width), num(f.py(base) - y_top), color(i),
            escape_html(tip(layers[i].label, x, row[i])));
        base += row[i];
      }
    }
  } else {
    std::vector<double> base(steps.size(), 0.0);
    for (std::size_t i = 0; i < layers.size(); ++i) {
      std::string upper, lower;
      std::size_t k = 0;
      for (const auto& [x, row] : by_step) {
        upper += fmt::format("{},{} ", num(f.px(x)), num(f.py(base[k] + row[i])));
        ++k;
      }
      for (std::size_t j = steps.size(); j-- > 0;) {
        lower += fmt::format("{},{} ", num(f.px(steps[j])), num(f.py(base[j])));
      }
      k = 0;
      for (const auto& [x, row] : by_step) base[k++] += row[i];
      lower.pop_back();
      chart.svg += fmt::format(R"(<polygon points="{}{}" fill="{}" fill-opacity="0.85"/>)", upper,
                               lower, color(i));
    }
  }
  if (!total.points.empty()) {
    std::size_t finite = 0;
    for (const auto& [x, y] : total.points) finite += std::isfinite(y) ? 1 : 0;
    chart.svg += draw_line(total, f, "#000000", bars ? finite : kMarkerLimit + 1);
  }
  chart.svg += legend_svg + "</svg>";
  return chart;
}

}  // namespace rig::report

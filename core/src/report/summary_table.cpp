#include "report/summary_table.hpp"

#include <cmath>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "report/axis.hpp"
#include "report/html_text.hpp"
#include "report/tags.hpp"

namespace rig::report {
namespace {

std::string row(std::string_view name, const std::string& final_value, const std::string& best,
                const std::string& best_step) {
  return fmt::format("<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td></tr>\n", escape_html(name),
                     final_value, best, best_step);
}

// Final value (the last step's, even if not finite: a NaN at the end matters)
// and the best finite one with its step.
std::string metric_row(const std::string& tag, const Series& series) {
  const bool lower = tags::lower_is_better(tag);
  std::optional<std::pair<std::int64_t, double>> best;
  for (const auto& [step, value] : series) {
    if (!std::isfinite(value)) continue;
    if (!best || (lower ? value < best->second : value > best->second)) best = {step, value};
  }
  return row(tag, format_value(series.rbegin()->second), best ? format_value(best->second) : "-",
             best ? fmt::format("{}", best->first) : "-");
}

std::optional<double> finite_mean(const Series& series) {
  double sum = 0;
  std::size_t n = 0;
  for (const auto& [step, value] : series) {
    if (std::isfinite(value)) sum += value, ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / static_cast<double>(n);
}

}  // namespace

std::string summary_table(const Metrics& metrics) {
  std::set<std::int64_t> steps;
  for (const auto& [tag, series] : metrics.series) {
    for (const auto& [step, value] : series) steps.insert(step);
  }
  std::string html =
      "<table class=\"summary\">\n<tr><th>Metric</th><th>Final</th><th>Best</th>"
      "<th>Best at step</th></tr>\n";
  if (!steps.empty()) {
    html += row("steps", fmt::format("{}", *steps.rbegin()), "", "");
    html += row("summaries",
                fmt::format("{} (steps {} to {})", steps.size(), *steps.begin(), *steps.rbegin()),
                "", "");
  }
  std::vector<std::string> shown = {std::string(tags::kTrainLoss), std::string(tags::kEvalLoss)};
  for (const auto& tag : tags::eval_metrics(metrics)) shown.push_back(tag);
  for (const auto& tag : shown) {
    const auto it = metrics.series.find(tag);
    if (it != metrics.series.end() && !it->second.empty()) html += metric_row(tag, it->second);
  }
  auto mean_row = [&](std::string_view tag, std::string_view name) {
    const auto it = metrics.series.find(std::string(tag));
    if (it == metrics.series.end()) return;
    const auto mean = finite_mean(it->second);
    html += row(name, mean ? format_value(*mean) : "-", "", "");
  };
  mean_row(tags::kThroughput, "mean objects per second");
  mean_row(tags::kStepTime, "mean time per step (s)");
  return html + "</table>\n";
}

}  // namespace rig::report

#include "report/report.hpp"

#include <fstream>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "engine/bottleneck.hpp"
#include "engine/ps/staleness_report.hpp"
#include "report/elastic_section.hpp"
#include "report/html_text.hpp"
#include "report/metrics_file.hpp"
#include "report/run_config.hpp"
#include "report/summary_table.hpp"
#include "report/svg_chart.hpp"
#include "report/tags.hpp"
#include "rig/error.hpp"
#include "rig/version.hpp"

namespace rig::report {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kStyle = R"(
body { font-family: sans-serif; color: #222; max-width: 760px; margin: 2em auto; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.15em; margin: 1.6em 0 0.4em; }
.meta, .note { color: #666; font-size: 0.9em; }
table.summary { border-collapse: collapse; }
table.summary th, table.summary td { border-bottom: 1px solid #ddd; padding: 0.25em 0.8em;
  text-align: right; font-variant-numeric: tabular-nums; }
table.summary th:first-child { text-align: left; font-weight: normal; }
table.summary tr:first-child th { font-weight: bold; }
svg { max-width: 100%; height: auto; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
)";

Line line_of(const Metrics& metrics, std::string_view tag) {
  Line line{std::string(tag), {}, false};
  const auto it = metrics.series.find(std::string(tag));
  if (it == metrics.series.end()) return line;
  for (const auto& [step, value] : it->second) {
    line.points.emplace_back(static_cast<double>(step), value);
  }
  return line;
}

std::string section(const std::string& heading, const Chart& chart) {
  std::string html = fmt::format("<section>\n<h2>{}</h2>\n{}\n", escape_html(heading), chart.svg);
  if (chart.not_drawn > 0) {
    html += fmt::format("<p class=\"note\">{} non-finite value{} (NaN or inf) not drawn.</p>\n",
                        chart.not_drawn, chart.not_drawn == 1 ? "" : "s");
  }
  return html + "</section>\n";
}

// The charts, in reading order; tags the run did not write get none.
std::string charts(const Metrics& metrics) {
  std::set<std::string> charted;
  std::string html;
  auto has = [&](std::string_view tag) { return metrics.series.contains(std::string(tag)); };
  auto single = [&](std::string_view tag, const std::string& heading, const std::string& y_label,
                    bool log_y = false) {
    if (!has(tag) || !charted.insert(std::string(tag)).second) return;
    html +=
        section(heading, line_chart({heading, y_label, "step", log_y}, {line_of(metrics, tag)}));
  };

  std::vector<Line> losses;
  for (auto tag : {tags::kTrainLoss, tags::kEvalLoss}) {
    if (!has(tag)) continue;
    charted.insert(std::string(tag));
    losses.push_back(line_of(metrics, tag));
  }
  if (!losses.empty()) html += section("Loss", line_chart({"Loss", "loss"}, losses));
  for (const auto& tag : tags::eval_metrics(metrics)) {
    single(tag, "Eval " + tag.substr(tags::kEvalPrefix.size()), tag);
  }
  single(tags::kLearningRate, "Learning rate", "learning rate");
  single(tags::kThroughput, "Throughput", "objects per second");

  std::vector<Line> parts;
  for (auto tag : tags::kStepTimeParts) {
    if (!has(tag)) continue;
    charted.insert(std::string(tag));
    parts.push_back(line_of(metrics, tag));
    parts.back().label = tag.substr(std::string_view("time/").size());
  }
  if (!parts.empty()) {
    Line total = line_of(metrics, tags::kStepTime);
    total.label = "whole step";
    total.dashed = true;
    charted.insert(std::string(tags::kStepTime));
    html += section("Step time split",
                    stacked_chart({"Step time split", "seconds per step"}, parts, total));
  }
  single(tags::kStepTime, "Time per step", "seconds per step");
  single(tags::kGradientNorm, "Global gradient norm", "gradient norm");
  single(tags::kLossScale, "Loss scale", "loss scale", true);
  for (const auto& [tag, series] : metrics.series) {
    if (!charted.contains(tag)) single(tag, tag, tag);
  }
  return html;
}

// The mean of a tag over the run, leaving out the first record (its interval
// holds the warm-up step) when there are more; nullopt when never written.
std::optional<double> run_mean(const Metrics& metrics, std::string_view tag) {
  const auto it = metrics.series.find(std::string(tag));
  if (it == metrics.series.end() || it->second.empty()) return std::nullopt;
  double sum = 0.0;
  int n = 0;
  bool first = it->second.size() > 1;
  for (const auto& [step, value] : it->second) {
    if (first) {
      first = false;
      continue;
    }
    sum += value;
    ++n;
  }
  return sum / n;
}

// "Where did the time go?": the engine's own verdict, from the step-time split.
std::string bottleneck_section(const Metrics& metrics) {
  const auto step = run_mean(metrics, tags::kStepTime);
  if (!step) return "";
  engine::StepCosts costs;
  costs.step = *step;
  costs.data = run_mean(metrics, "time/data").value_or(0.0);
  costs.communication = run_mean(metrics, "time/communication").value_or(0.0);
  costs.comm_busy = run_mean(metrics, "comm/busy_seconds").value_or(0.0);
  costs.comm_bytes = run_mean(metrics, "comm/megabytes_per_step").value_or(0.0) * 1e6;
  costs.world_size = static_cast<int>(run_mean(metrics, "comm/world_size").value_or(1.0));
  costs.parameter_server = metrics.series.contains("ps/global_step");
  return "<section>\n<h2>Bottleneck</h2>\n<p>" + escape_html(engine::describe_bottleneck(costs)) +
         "</p>\n</section>\n";
}

// A parameter-server run: the histogram of the staleness its reads were served at.
std::string parameter_server_section(const fs::path& logdir) {
  const auto h = engine::ps::read_staleness_histogram(logdir / "parameter_server.yaml");
  if (!h || h->reads.empty()) return "";
  Line bars{"reads served", {}, false};
  std::int64_t reads = 0;
  for (const auto& [staleness, count] : h->reads) {
    bars.points.emplace_back(static_cast<double>(staleness), static_cast<double>(count));
    reads += count;
  }
  const Chart chart = stacked_chart(
      {"Staleness of the reads", "reads served", "staleness (steps ahead of the slowest worker)"},
      {bars}, Line{});
  const auto number = [&](const char* key) {
    return h->run[key] ? h->run[key].as<std::string>() : std::string("?");
  };
  const std::string s = number("max_staleness");
  return fmt::format(
      "<section>\n<h2>Parameter server</h2>\n<p>{} worker(s), {} server(s), max_staleness {}; "
      "global step {}; {} reads of the weights served, at the staleness below.</p>\n{}\n"
      "</section>\n",
      escape_html(number("workers")), escape_html(number("servers")),
      escape_html(s == "-1" ? "unbounded" : s), escape_html(number("global_step")), reads,
      chart.svg);
}

}  // namespace

fs::path write_report(const fs::path& logdir, const fs::path& output) {
  if (!fs::is_directory(logdir)) {
    throw UserError(fmt::format("{} is not a folder: rig report LOGDIR needs the logdir of a run",
                                logdir.string()));
  }
  const fs::path metrics_file = logdir / "metrics.jsonl";
  if (!fs::exists(metrics_file)) {
    throw UserError(fmt::format(
        "{} not found: rig report reads the metrics.jsonl that training writes every "
        "save_summaries_steps (it is not written with --benchmark or save_summaries_steps: 0)",
        metrics_file.string()));
  }
  const Metrics metrics = read_metrics(metrics_file);
  const RunConfig config = read_run_config(logdir);
  const std::string title = report_title(config, logdir);

  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>rig report: {0}</title>\n<style>{1}</style>\n</head>\n<body>\n<h1>{0}</h1>\n"
      "<p class=\"meta\">{2} &middot; {3} lines of metrics.jsonl &middot; rig {4}</p>\n",
      escape_html(title), kStyle, escape_html(fs::absolute(logdir).lexically_normal().string()),
      metrics.records, RIG_VERSION);
  html += "<section>\n<h2>Summary</h2>\n" + summary_table(metrics) + "</section>\n";
  html += bottleneck_section(metrics);
  html += parameter_server_section(logdir);
  html += elastic_section(logdir);
  html += charts(metrics);
  if (!config.text.empty()) {
    html += "<section>\n<h2>Config</h2>\n<pre>" + escape_html(config.text) + "</pre>\n</section>\n";
  }
  html += "</body>\n</html>\n";

  const fs::path file = output.empty() ? logdir / "report.html" : output;
  std::ofstream out(file, std::ios::out | std::ios::trunc | std::ios::binary);
  out << html;
  out.close();
  if (!out) {
    throw UserError(
        fmt::format("cannot write the report to {}; does its folder exist?", file.string()));
  }
  return file;
}

}  // namespace rig::report

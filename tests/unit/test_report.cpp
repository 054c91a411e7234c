// `rig report`: metrics.jsonl parsing (later lines win, file:line errors),
// the axes, the SVG charts and the self-contained HTML file.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "report/axis.hpp"
#include "report/metrics_file.hpp"
#include "report/report.hpp"
#include "report/svg_chart.hpp"
#include "user_error_of.hpp"

namespace {

namespace fs = std::filesystem;
using rig_test::user_error_of;
using namespace rig::report;

fs::path fresh_dir() {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(testing::TempDir()) / "rig_report" / info->name();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_text(const fs::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary) << text;
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A training run's metrics: train summaries every 10 steps, eval every 50, a
// NaN loss at step 30, then a resumed run that rewrote step 40 onwards.
std::string fixture_metrics() {
  std::string text;
  for (int step = 0; step <= 100; step += 10) {
    const double loss = step == 30 ? NAN : 2.0 / (1 + step / 10.0);
    text += R"({"step":)" + std::to_string(step) + R"(,"wall_time":1700000000.5,"train_loss":)" +
            (std::isnan(loss) ? std::string("null") : std::to_string(loss)) +
            R"(,"learning_rate":0.1,"objects_per_second":1200.5,"time/data":0.001,)"
            R"("time/forward":0.004,"time/backward":0.006,"time/communication":0,)"
            R"("time/optimizer":0.002,"time/step":0.0135})"
            "\n";
    if (step % 50 == 0 && step > 0) {
      text += R"({"step":)" + std::to_string(step) +
              R"(,"wall_time":1700000001,"eval_loss":0.9,"eval_accuracy":0.75,"eval_BLEU":21.5})"
              "\n";
    }
  }
  text += "\n";  // a blank line is skipped
  // The resumed run: steps 40 and 50 again, with other values (these win).
  text += R"({"step":40,"wall_time":1700000100,"train_loss":0.125})"
          "\n";
  text += R"({"step":50,"wall_time":1700000101,"eval_loss":0.5,"eval_accuracy":0.875})"
          "\n";
  return text;
}

const char* kConfig =
    "# Resolved by rig 0.1.0 from experiments/smoke.yaml\n"
    "# command line: rig run experiments/smoke.yaml\n"
    "# mode: train\n"
    "max_steps: 100\n"
    "model: mlp\n"
    "note: \"a<b & c\"\n";

fs::path fixture_logdir() {
  const fs::path dir = fresh_dir() / "run";
  fs::create_directories(dir);
  write_text(dir / "metrics.jsonl", fixture_metrics());
  write_text(dir / "config.yaml", kConfig);
  return dir;
}

TEST(ReportMetrics, LaterLinesWinAndNullIsNaN) {
  const fs::path dir = fixture_logdir();
  const Metrics m = read_metrics(dir / "metrics.jsonl");
  EXPECT_EQ(m.records, 11U + 2U + 2U);
  EXPECT_EQ(m.series.at("train_loss").size(), 11U);
  EXPECT_EQ(m.series.at("train_loss").at(40), 0.125);
  EXPECT_TRUE(std::isnan(m.series.at("train_loss").at(30)));
  EXPECT_EQ(m.series.at("eval_loss").at(50), 0.5);
  EXPECT_EQ(m.series.at("eval_BLEU").at(50), 21.5);  // not rewritten: kept
  EXPECT_EQ(m.wall_time.at(50), 1700000101);
  EXPECT_FALSE(m.series.contains("wall_time"));
  EXPECT_FALSE(m.series.contains("step"));
}

TEST(ReportMetrics, MalformedLinesNameFileAndLine) {
  const fs::path file = fresh_dir() / "metrics.jsonl";
  const std::string good = R"({"step":1,"train_loss":1})"
                           "\n"
                           R"({"step":2,"train_loss":0.5})"
                           "\n";
  auto error_for = [&](const std::string& third_line) {
    write_text(file, good + third_line + "\n");
    return user_error_of([&] { read_metrics(file); });
  };
  const std::string where = file.string() + ":3: ";
  EXPECT_EQ(error_for(R"({"step":3,"train_loss":)").rfind(where, 0), 0U)
      << error_for(R"({"step":3,"train_loss":)");
  EXPECT_NE(error_for(R"({"step":3,"train_loss":)").find("not a JSON line"), std::string::npos);
  EXPECT_EQ(error_for("[1, 2]"), where + "expected a JSON object {\"step\": N, ...}, found array");
  EXPECT_EQ(error_for(R"({"train_loss":1})"),
            where + "expected \"step\" to be an integer >= 0, found no step");
  EXPECT_EQ(error_for(R"({"step":1.5})"),
            where + "expected \"step\" to be an integer >= 0, found 1.5");
  EXPECT_EQ(error_for(R"({"step":3,"train_loss":"low"})"),
            where + "expected \"train_loss\" to be a number or null, found string \"low\"");
}

TEST(ReportMetrics, MissingOrEmptyFile) {
  const fs::path dir = fresh_dir();
  EXPECT_NE(user_error_of([&] { write_report(dir, {}); }).find((dir / "metrics.jsonl").string()),
            std::string::npos);
  EXPECT_NE(user_error_of([&] { write_report(dir / "nope", {}); }).find("is not a folder"),
            std::string::npos);
  write_text(dir / "metrics.jsonl", "\n");
  EXPECT_NE(user_error_of([&] { write_report(dir, {}); }).find("holds no metrics"),
            std::string::npos);
}

TEST(ReportAxis, NiceTicksAndLabels) {
  const Axis y = linear_axis(0.23, 1.41, 5, true, false);
  EXPECT_DOUBLE_EQ(y.lo, 0.2);
  EXPECT_DOUBLE_EQ(y.hi, 1.6);
  ASSERT_EQ(y.ticks.size(), 8U);
  EXPECT_EQ(tick_label(y, y.ticks[1]), "0.4");
  EXPECT_EQ(tick_label(y, 0), "0");

  const Axis x = linear_axis(0, 20000, 6, false, true);
  EXPECT_EQ(x.spacing, 5000);
  EXPECT_EQ(tick_label(x, 15000), "15k");

  const Axis steps = linear_axis(3, 5, 6, false, true);  // never fractional steps
  EXPECT_EQ(steps.ticks, (std::vector<double>{3, 4, 5}));

  const Axis single = linear_axis(7, 7, 5, true, false);  // one value gets room
  EXPECT_LT(single.lo, 7);
  EXPECT_GT(single.hi, 7);

  const Axis log = log_axis(1, 65536);
  EXPECT_TRUE(log.log);
  EXPECT_EQ(log.ticks, (std::vector<double>{1, 10, 100, 1000, 1e4, 1e5}));
  EXPECT_EQ(tick_label(log, 1000), "1000");

  EXPECT_EQ(format_value(NAN), "NaN");
  EXPECT_EQ(format_value(-INFINITY), "-inf");
  EXPECT_EQ(format_value(0.123456789), "0.12346");
}

// Every element opened in the SVG is closed, in order. A scan, not a
// std::regex: libstdc++'s regex recurses once per character of a match, and
// a long polyline's attribute overflows an unoptimised sanitizer build's stack.
void expect_balanced_tags(const std::string& svg) {
  std::vector<std::string> open;
  for (std::size_t at = svg.find('<'); at != std::string::npos; at = svg.find('<', at + 1)) {
    const std::size_t end = svg.find('>', at);
    ASSERT_NE(end, std::string::npos) << "unclosed '<' at byte " << at;
    const bool closing = svg[at + 1] == '/';
    const std::size_t name_begin = at + (closing ? 2 : 1);
    std::size_t name_end = name_begin;
    while (name_end < end && std::isalpha(static_cast<unsigned char>(svg[name_end]))) ++name_end;
    if (name_end == name_begin) continue;  // <?xml ...?>, <!-- -->
    if (svg[end - 1] == '/') continue;     // <x/>
    const std::string name = svg.substr(name_begin, name_end - name_begin);
    if (!closing) {
      open.push_back(name);
    } else {
      ASSERT_FALSE(open.empty()) << "stray </" << name << ">";
      ASSERT_EQ(open.back(), name);
      open.pop_back();
    }
  }
  EXPECT_TRUE(open.empty());
}

TEST(ReportCharts, LinesBreakAtNaNAndLongRunsAreThinned) {
  Line line{"train_loss", {{0, 1.0}, {1, 0.5}, {2, NAN}, {3, 0.25}, {4, 0.2}}, false};
  const Chart chart = line_chart({"Loss", "loss"}, {line});
  EXPECT_EQ(chart.not_drawn, 1U);
  EXPECT_EQ(count(chart.svg, "<polyline"), 2U);  // broken at the NaN
  EXPECT_EQ(count(chart.svg, "<circle"), 4U);    // few points: each one marked
  expect_balanced_tags(chart.svg);

  Line many{"train_loss", {}, false};
  for (int i = 0; i < 100000; ++i) many.points.emplace_back(i, std::sin(i * 0.01));
  const Chart big = line_chart({"Loss", "loss"}, {many});
  EXPECT_EQ(count(big.svg, "<circle"), 0U);
  EXPECT_LT(big.svg.size(), 100000U);  // at most 4 points per pixel column
  expect_balanced_tags(big.svg);

  const Chart none = line_chart({"Loss", "loss"}, {Line{"x", {{0, NAN}}, false}});
  EXPECT_NE(none.svg.find("no finite values"), std::string::npos);
  expect_balanced_tags(none.svg);
}

TEST(ReportCharts, StackedBarsForFewStepsAreasForMany) {
  std::vector<Line> parts = {{"data", {{10, 0.1}, {20, 0.2}}, false},
                             {"forward", {{10, 0.3}, {20, NAN}}, false}};
  const Chart bars = stacked_chart({"split", "s"}, parts, Line{"whole step", {}, true});
  EXPECT_EQ(count(bars.svg, "</rect>"), 3U);  // bars carry a tooltip; the NaN one is left out
  EXPECT_EQ(count(bars.svg, "<polygon"), 0U);
  EXPECT_EQ(bars.not_drawn, 1U);
  expect_balanced_tags(bars.svg);

  std::vector<Line> long_parts = {{"data", {}, false}, {"forward", {}, false}};
  Line total{"whole step", {}, true};
  for (int s = 0; s < 200; ++s) {
    long_parts[0].points.emplace_back(s, 0.01);
    long_parts[1].points.emplace_back(s, 0.02);
    total.points.emplace_back(s, 0.035);
  }
  const Chart areas = stacked_chart({"split", "s"}, long_parts, total);
  EXPECT_EQ(count(areas.svg, "<polygon"), 2U);
  EXPECT_EQ(count(areas.svg, "stroke-dasharray"), 2U);  // the total and its legend entry
  expect_balanced_tags(areas.svg);
}

TEST(Report, WritesSelfContainedHtml) {
  const fs::path dir = fixture_logdir();
  const fs::path file = write_report(dir, {});
  EXPECT_EQ(file, dir / "report.html");
  const std::string html = read_text(file);

  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0U);
  EXPECT_NE(html.find("<title>rig report: smoke (mlp)</title>"), std::string::npos);
  // One chart per present tag group, none for absent tags.
  for (const char* heading :
       {"<h2>Loss</h2>", "<h2>Eval accuracy</h2>", "<h2>Eval BLEU</h2>", "<h2>Learning rate</h2>",
        "<h2>Throughput</h2>", "<h2>Step time split</h2>"}) {
    const auto at = html.find(heading);
    ASSERT_NE(at, std::string::npos) << heading;
    EXPECT_LT(html.find("<svg", at), html.find("</section>", at)) << heading;
  }
  EXPECT_EQ(count(html, "<svg"), 6U);
  EXPECT_EQ(count(html, "</svg>"), 6U);
  EXPECT_EQ(html.find("Global gradient norm"), std::string::npos);
  EXPECT_EQ(html.find("Loss scale"), std::string::npos);
  EXPECT_EQ(html.find("<h2>Time per step</h2>"), std::string::npos);  // drawn in the split
  EXPECT_NE(html.find("1 non-finite value (NaN or inf) not drawn."), std::string::npos);

  // Nothing fetched from elsewhere: the only URL is the SVG namespace.
  const std::regex url(R"(https?://[^"'\s<>]*)");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), url); it != std::sregex_iterator();
       ++it) {
    EXPECT_EQ(it->str(), "http://www.w3.org/2000/svg");
  }
  for (const char* external : {"<script", "<link", "<img", "<iframe", "@import", "url("}) {
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  }

  // Summary: the resumed run's values win (best eval_accuracy 0.875 at 50;
  // train_loss best 0.125 at 40).
  EXPECT_NE(html.find("<tr><th>eval_accuracy</th><td>0.75</td><td>0.875</td><td>50</td></tr>"),
            std::string::npos);
  EXPECT_NE(html.find("<tr><th>train_loss</th><td>0.18182</td><td>0.125</td><td>40</td></tr>"),
            std::string::npos);
  EXPECT_NE(html.find("<tr><th>eval_loss</th><td>0.9</td><td>0.5</td><td>50</td></tr>"),
            std::string::npos);
  EXPECT_NE(html.find("<tr><th>mean objects per second</th><td>1200.5</td>"), std::string::npos);
  // The config, escaped, in a <pre>.
  EXPECT_NE(html.find("note: &quot;a&lt;b &amp; c&quot;"), std::string::npos);
  EXPECT_LT(html.find("<pre>"), html.find("max_steps: 100"));
}

TEST(Report, OutputPathAndNoConfig) {
  const fs::path dir = fresh_dir();
  write_text(dir / "metrics.jsonl", R"({"step":5,"loss_scale":32768,"global_gradient_norm":1.5})"
                                    "\n"
                                    R"({"step":6,"loss_scale":16,"custom":3})"
                                    "\n");
  const fs::path out = dir / "elsewhere.html";
  EXPECT_EQ(write_report(dir, out), out);
  EXPECT_FALSE(fs::exists(dir / "report.html"));
  const std::string html = read_text(out);
  EXPECT_NE(html.find("<h2>Loss scale</h2>"), std::string::npos);
  EXPECT_NE(html.find("<h2>Global gradient norm</h2>"), std::string::npos);
  EXPECT_NE(html.find("<h2>custom</h2>"), std::string::npos);  // unknown tags still shown
  EXPECT_EQ(html.find("<h2>Config</h2>"), std::string::npos);
  EXPECT_EQ(count(html, "<svg"), 3U);
  EXPECT_NE(user_error_of([&] {
              write_report(dir, dir / "no" / "such" / "dir.html");
            }).find("cannot write the report"),
            std::string::npos);
}

}  // namespace

#include "report/metrics_file.hpp"

#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rig/error.hpp"

namespace rig::report {
namespace {

std::string json_type(const nlohmann::json& value) {
  return value.type_name();
}

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string parse_message(const nlohmann::json::parse_error& e) {
  std::string text = e.what();
  const auto end = text.find("] ");
  return text.starts_with("[json.exception") && end != std::string::npos ? text.substr(end + 2)
                                                                         : text;
}

}  // namespace

Metrics read_metrics(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) {
    throw UserError(
        fmt::format("cannot read {}: rig report needs the metrics.jsonl that training writes every "
                    "save_summaries_steps; is this the logdir of a training run?",
                    file.string()));
  }
  Metrics metrics;
  std::string text;
  for (std::size_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto where = [&] { return fmt::format("{}:{}", file.string(), line); };
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      throw UserError(fmt::format("{}: not a JSON line ({}); fix or delete the line", where(),
                                  parse_message(e)));
    }
    if (!record.is_object()) {
      throw UserError(fmt::format("{}: expected a JSON object {{\"step\": N, ...}}, found {}",
                                  where(), json_type(record)));
    }
    const auto step_it = record.find("step");
    if (step_it == record.end() || !step_it->is_number_integer() ||
        step_it->get<std::int64_t>() < 0) {
      throw UserError(fmt::format("{}: expected \"step\" to be an integer >= 0, found {}", where(),
                                  step_it == record.end() ? "no step" : step_it->dump()));
    }
    const auto step = step_it->get<std::int64_t>();
    for (const auto& [key, value] : record.items()) {
      if (key == "step") continue;
      if (!value.is_number() && !value.is_null()) {
        throw UserError(fmt::format("{}: expected \"{}\" to be a number or null, found {} {}",
                                    where(), key, json_type(value), value.dump()));
      }
      const double v =
          value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.get<double>();
      if (key == "wall_time") {
        metrics.wall_time[step] = v;
      } else {
        metrics.series[key][step] = v;
      }
    }
    ++metrics.records;
  }
  if (in.bad()) throw UserError(fmt::format("error reading {}", file.string()));
  if (metrics.records == 0) {
    throw UserError(
        fmt::format("{} holds no metrics yet: training writes a line every save_summaries_steps",
                    file.string()));
  }
  return metrics;
}

}  // namespace rig::report

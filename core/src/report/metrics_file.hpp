// Reading a run's metrics.jsonl (written by engine::SummaryWriter) for the report.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace rig::report {

// step -> value; NaN where the file holds null (a non-finite value).
using Series = std::map<std::int64_t, double>;

struct Metrics {
  std::map<std::string, Series> series;      // by tag; wall_time is not a tag
  std::map<std::int64_t, double> wall_time;  // step -> unix seconds
  std::size_t records = 0;                   // lines read
};

// Parses every line; a later line wins for the same step and tag (a resumed
// run appends to the file). Throws UserError naming file:line for a line that
// is not a JSON object with an integer "step" and number-or-null values.
Metrics read_metrics(const std::filesystem::path& file);

}  // namespace rig::report

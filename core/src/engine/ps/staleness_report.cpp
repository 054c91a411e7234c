#include "engine/ps/staleness_report.hpp"

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig::engine::ps {

void write_staleness_histogram(const std::filesystem::path& file, YAML::Node run,
                               const std::map<std::int64_t, std::int64_t>& staleness) {
  YAML::Node reads(YAML::NodeType::Map);
  for (const auto& [value, count] : staleness) reads[value] = count;
  run["staleness_reads"] = reads;
  std::ofstream out(file);
  out << "# What the parameter servers saw: reads of the weights served at each staleness\n"
      << "# (steps ahead of the slowest worker). Written by rig at the end of training.\n"
      << YAML::Dump(run) << "\n";
  if (!out) throw UserError(fmt::format("cannot write {}", file.string()));
}

std::string describe_staleness(const std::map<std::int64_t, std::int64_t>& staleness) {
  constexpr std::size_t kShown = 6;
  std::int64_t reads = 0;
  double sum = 0.0;
  for (const auto& [value, count] : staleness) {
    reads += count;
    sum += static_cast<double>(value * count);
  }
  const double total = static_cast<double>(std::max<std::int64_t>(reads, 1));
  std::string histogram;
  std::size_t shown = 0;
  std::int64_t tail = 0;
  std::int64_t tail_from = 0;
  for (const auto& [value, count] : staleness) {
    if (shown++ < kShown) {
      histogram += fmt::format("{}{}: {:.1f}%", histogram.empty() ? "" : ", ", value,
                               100.0 * static_cast<double>(count) / total);
    } else {
      if (tail == 0) tail_from = value;
      tail += count;
    }
  }
  if (tail > 0) {
    histogram +=
        fmt::format(", {} or more: {:.1f}%", tail_from, 100.0 * static_cast<double>(tail) / total);
  }
  const std::int64_t max = staleness.empty() ? 0 : staleness.rbegin()->first;
  return fmt::format("staleness of the {} reads served: mean {:.2f}, max {} ({})", reads,
                     sum / total, max, histogram);
}

std::optional<StalenessHistogram> read_staleness_histogram(const std::filesystem::path& file) {
  if (!std::filesystem::exists(file)) return std::nullopt;
  try {
    StalenessHistogram h;
    h.run = YAML::LoadFile(file.string());
    for (const auto& entry : h.run["staleness_reads"]) {
      h.reads[entry.first.as<std::int64_t>()] = entry.second.as<std::int64_t>();
    }
    return h;
  } catch (const YAML::Exception& e) {
    throw UserError(
        fmt::format("{} is not a parameter-server summary rig wrote: {}", file.string(), e.what()));
  }
}

}  // namespace rig::engine::ps

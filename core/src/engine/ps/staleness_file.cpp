#include "engine/ps/staleness_file.hpp"

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

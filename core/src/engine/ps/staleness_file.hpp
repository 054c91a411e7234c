// LOGDIR/parameter_server.yaml: what a parameter-server run's servers saw,
// written by worker 0 at the end, drawn by `rig report` as a histogram.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>

#include <yaml-cpp/yaml.h>

namespace rig::engine::ps {

// `run`: workers, servers, max_staleness, global_step, ...; `staleness`: how
// many reads were served at each staleness.
void write_staleness_histogram(const std::filesystem::path& file, YAML::Node run,
                               const std::map<std::int64_t, std::int64_t>& staleness);

struct StalenessHistogram {
  YAML::Node run;
  std::map<std::int64_t, std::int64_t> reads;  // staleness -> reads served
};

// Empty when the file does not exist; throws UserError naming it when it is malformed.
std::optional<StalenessHistogram> read_staleness_histogram(const std::filesystem::path& file);

}  // namespace rig::engine::ps

// The staleness a parameter-server run's servers saw: the line worker 0
// prints, and LOGDIR/parameter_server.yaml, which `rig report` draws as a
// histogram.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <yaml-cpp/yaml.h>

namespace rig::engine::ps {

// `run`: workers, servers, max_staleness, global_step, ...; `staleness`: how
// many reads were served at each staleness.
void write_staleness_histogram(const std::filesystem::path& file, YAML::Node run,
                               const std::map<std::int64_t, std::int64_t>& staleness);

// "staleness of the 82 reads served: mean 0.96, max 2 (0: 51.2%, 1: 1.2%, 2:
// 47.6%)": the first values one by one, a long tail (unbounded runs) as one share.
std::string describe_staleness(const std::map<std::int64_t, std::int64_t>& staleness);

struct StalenessHistogram {
  YAML::Node run;
  std::map<std::int64_t, std::int64_t> reads;  // staleness -> reads served
};

// Empty when the file does not exist; throws UserError naming it when it is malformed.
std::optional<StalenessHistogram> read_staleness_histogram(const std::filesystem::path& file);

}  // namespace rig::engine::ps

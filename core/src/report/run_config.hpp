// What the report shows of a run's logdir/config.yaml.
#pragma once

#include <filesystem>
#include <string>

namespace rig::report {

struct RunConfig {
  std::string text;        // the file as written; empty when there is none
  std::string experiment;  // the experiment file's stem, from the "# Resolved by" line
  std::string model;       // the `model` key
};

// Reads LOGDIR/config.yaml. A missing or unparsable file is not an error:
// the report then has no config section and falls back to the logdir's name.
RunConfig read_run_config(const std::filesystem::path& logdir);

// "experiment (model)", or whichever of them is known, or the logdir's name.
std::string report_title(const RunConfig& config, const std::filesystem::path& logdir);

}  // namespace rig::report

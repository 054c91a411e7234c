// An experiment file: loaded and checked as written, then resolved per mode.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/experiment_schema.hpp"
#include "config/overrides.hpp"
#include "config/resolved_config.hpp"
#include "config/source_map.hpp"

namespace rig::config {

class ExperimentFile {
 public:
  // Reads and parses `path`, and validates the file's structure against the
  // experiment schema. Throws UserError naming the file, line and key.
  static ExperimentFile load(const std::string& path);
  // The same from text; `path` names the file in messages.
  static ExperimentFile parse(const std::string& text, const std::string& path);

  // The config of `mode` ("train", "eval", "infer"): base_params deep-merged
  // with <mode>_params, then `overrides` in order, then schema defaults, then
  // validated against definitions/resolved_<mode>. Throws UserError.
  ResolvedConfig resolve(const std::string& mode,
                         const std::vector<Override>& overrides = {}) const;

  const std::string& path() const { return path_; }
  const YAML::Node& root() const { return root_; }
  // File paths ("base_params.max_steps") -> positions.
  const SourceMap& sources() const { return sources_; }

 private:
  std::string path_;
  YAML::Node root_;
  SourceMap sources_;
};

// Throws UserError unless exactly one of `keys` is set in `cfg` (e.g.
// max_steps / num_epochs), naming where each one that is set comes from.
void require_exactly_one(const ResolvedConfig& cfg, const std::vector<std::string>& keys);

}  // namespace rig::config

// Deep merge of an experiment file's sections into one mode's config.
#pragma once

#include <string>

#include <yaml-cpp/yaml.h>

#include "config/source_map.hpp"

namespace rig::config {

// Merges `section` (a map of the file, at `section_path` such as
// "train_params") into `target`: maps merge key by key, anything else (a
// scalar, a list, a map over a non-map) replaces. `sources` follows: a
// replaced value takes its place in the file from `file_sources` (keyed by
// file paths); a merged map keeps the place of the map it merged into.
void merge_section(YAML::Node target, const YAML::Node& section, const std::string& section_path,
                   const SourceMap& file_sources, SourceMap& sources);

}  // namespace rig::config

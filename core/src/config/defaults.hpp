// Schema defaults (valijson does not apply `default`).
#pragma once

#include <string>

#include <yaml-cpp/yaml.h>

#include "config/schema_doc.hpp"
#include "config/source_map.hpp"

namespace rig::config {

// Sets every property that `schema` declares with a `default` and `data`
// lacks, recursively through nested maps and list items. An absent nested map
// is created when its schema gives defaults and requires nothing, so a plugin
// reads `encoder_params.num_layers` without checking for the map. Records
// each default in `sources` (when given) as "schema default" under `path`.
void fill_defaults(const SchemaDoc& doc, const YAML::Node& schema, YAML::Node data,
                   const std::string& path, SourceMap* sources);

}  // namespace rig::config

// A plugin of the build tree (RIG_BENCH_PLUGIN_DIR), loaded as rig loads it,
// with its parameters made as rig makes them: the schema's defaults, nested
// objects' included, with the benchmark's settings on top.
#pragma once

#include <string>

#include <yaml-cpp/yaml.h>
#include <boost/dll/shared_library.hpp>

#include "rig/plugin.hpp"

namespace rig_bench {

struct Plugin {
  boost::dll::shared_library library;
  const rig::PluginDescriptor* descriptor;

  Plugin(const std::string& kind, const std::string& name)
      : library(std::string(RIG_BENCH_PLUGIN_DIR) + "/rig-" + kind + "-" + name + ".so"),
        descriptor(&library.get_alias<const rig::PluginDescriptor>("rig_plugin")) {}

  // The schema's defaults with `overrides` (a YAML map) on top.
  YAML::Node params(const std::string& overrides) const {
    YAML::Node params = defaults(YAML::Load(descriptor->schema_text()));
    merge(params, YAML::Load(overrides));
    return params;
  }

 private:
  static YAML::Node defaults(const YAML::Node& schema) {
    YAML::Node out(YAML::NodeType::Map);
    for (const auto& property : schema["properties"]) {
      const auto key = property.first.as<std::string>();
      if (property.second["default"]) {
        out[key] = YAML::Clone(property.second["default"]);
      } else if (property.second["properties"]) {
        out[key] = defaults(property.second);
      }
    }
    return out;
  }

  static void merge(YAML::Node base, const YAML::Node& overrides) {
    for (const auto& entry : overrides) {
      const auto key = entry.first.as<std::string>();
      if (entry.second.IsMap() && base[key] && base[key].IsMap()) {
        merge(base[key], entry.second);
      } else {
        base[key] = entry.second;
      }
    }
  }
};

}  // namespace rig_bench

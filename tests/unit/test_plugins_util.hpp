// Loads the built plugin shared objects for the plugin unit tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include <yaml-cpp/yaml.h>
#include <boost/dll/shared_library.hpp>

#include "rig/plugin.hpp"

namespace rig_test {

// A loaded plugin. Declare it before the objects it makes: they must be
// destroyed while the library is still loaded.
struct LoadedPlugin {
  boost::dll::shared_library library;
  const rig::PluginDescriptor* descriptor = nullptr;

  LoadedPlugin(const std::string& kind, const std::string& name)
      : library(std::string(RIG_BUILD_DIR) + "/plugins/rig-" + kind + "-" + name + ".so") {
    descriptor = &library.get_alias<const rig::PluginDescriptor>("rig_plugin");
  }

  YAML::Node schema() const { return YAML::Load(descriptor->schema_text()); }

  // The schema's defaults, then `overrides` (YAML text) on top: what the host
  // hands a plugin after validation.
  YAML::Node params(const std::string& overrides = "{}") const {
    YAML::Node params(YAML::NodeType::Map);
    for (const auto& property : schema()["properties"]) {
      if (property.second["default"]) {
        params[property.first.as<std::string>()] = YAML::Clone(property.second["default"]);
      }
    }
    for (const auto& entry : YAML::Load(overrides)) {
      params[entry.first.as<std::string>()] = entry.second;
    }
    return params;
  }
};

}  // namespace rig_test

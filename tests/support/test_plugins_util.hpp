// Loads the built plugin shared objects for the plugin unit tests (each
// plugin's test_<name>.cpp) and the unit tests of librig that drive plugins.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

  // A data layer of this plugin for one rank, as the host would build it.
  std::unique_ptr<rig::DataLayer> data_layer(const YAML::Node& params, rig::Mode mode,
                                             std::int64_t batch_size, int rank, int world_size,
                                             std::uint64_t run_seed) const {
    rig::DataLayerContext ctx;
    ctx.run.mode = mode;
    ctx.run.rank = rank;
    ctx.run.world_size = world_size;
    ctx.run.seed = run_seed;
    ctx.batch_size = batch_size;
    return descriptor->make_data_layer(params, ctx);
  }
};

// Sample ids of every batch until the epoch ends.
inline std::vector<std::vector<std::int64_t>> epoch_indices(rig::DataLayer& data) {
  std::vector<std::vector<std::int64_t>> batches;
  while (auto batch = data.next_batch()) batches.push_back(batch->indices);
  return batches;
}

inline std::vector<std::int64_t> flatten(const std::vector<std::vector<std::int64_t>>& batches) {
  std::vector<std::int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

}  // namespace rig_test

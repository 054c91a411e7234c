// Turns an experiment file into a fully resolved config for one mode: the
// experiment schema's defaults and checks, then every named plugin opened and
// its <kind>_params validated against (and defaulted from) the plugin's schema.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/experiment_file.hpp"
#include "plugin_host/plugin_host.hpp"

namespace rig::engine {

struct ResolvedExperiment {
  config::ResolvedConfig config;
  std::map<PluginKind, std::shared_ptr<const plugin_host::PluginLibrary>> plugins;

  const plugin_host::PluginLibrary& plugin(PluginKind kind) const;  // throws if absent
  YAML::Node params(PluginKind kind) const;                         // <kind>_params
};

ResolvedExperiment resolve_experiment(const config::ExperimentFile& file, const std::string& mode,
                                      const std::vector<config::Override>& overrides,
                                      const plugin_host::PluginHost& host);

}  // namespace rig::engine

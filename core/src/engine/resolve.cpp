#include "engine/resolve.hpp"

#include <fmt/format.h>

#include "config/schema_validator.hpp"
#include "rig/error.hpp"

namespace rig::engine {

const plugin_host::PluginLibrary& ResolvedExperiment::plugin(PluginKind kind) const {
  auto it = plugins.find(kind);
  if (it == plugins.end()) {
    throw UserError(fmt::format("{} mode needs a {}: set '{}' in base_params or {}_params",
                                config.mode, to_string(kind), to_string(kind), config.mode));
  }
  return *it->second;
}

YAML::Node ResolvedExperiment::params(PluginKind kind) const {
  return config.root[fmt::format("{}_params", to_string(kind))];
}

ResolvedExperiment resolve_experiment(const config::ExperimentFile& file, const std::string& mode,
                                      const std::vector<config::Override>& overrides,
                                      const plugin_host::PluginHost& host) {
  ResolvedExperiment out{file.resolve(mode, overrides), {}};
  for (PluginKind kind : kAllPluginKinds) {
    const std::string key(to_string(kind));
    YAML::Node name = out.config.root[key];
    if (!name || name.IsNull()) continue;
    const std::string value = name.as<std::string>();
    std::shared_ptr<const plugin_host::PluginLibrary> library;
    try {
      library = host.open(kind, value);
    } catch (const UserError& e) {
      const auto where = out.config.where(key);
      throw UserError(fmt::format("{}: {}: {}", where.describe(),
                                  where.key_path.empty() ? key : where.key_path, e.what()));
    }
    const std::string params_key = key + "_params";
    if (!out.config.root[params_key] || out.config.root[params_key].IsNull()) {
      out.config.root[params_key] = YAML::Node(YAML::NodeType::Map);
    }
    YAML::Node params = out.config.root[params_key];
    config::validate_plugin_params(library->schema_text(), params, out.config, params_key,
                                   fmt::format("{} '{}'", key, value));
    out.plugins.emplace(kind, std::move(library));
  }
  return out;
}

}  // namespace rig::engine

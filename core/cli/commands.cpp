#include "commands.hpp"

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/experiment_file.hpp"
#include "engine/resolve.hpp"
#include "rig/error.hpp"

namespace rig::cli {
namespace {

plugin_host::PluginHost make_host(const std::vector<std::string>& plugin_paths) {
  return plugin_host::PluginHost(plugin_host::PluginHost::default_search_path(plugin_paths));
}

}  // namespace

int print_config(const std::string& experiment, const std::string& mode,
                 const std::vector<config::Override>& overrides,
                 const std::vector<std::string>& plugin_paths) {
  if (mode != "train" && mode != "eval" && mode != "infer") {
    throw UserError(
        fmt::format("unknown mode '{}' for config: expected train, eval or infer", mode));
  }
  const auto file = config::ExperimentFile::load(experiment);
  const auto resolved = engine::resolve_experiment(file, mode, overrides, make_host(plugin_paths));
  fmt::print("# {} resolved for {} mode\n{}\n", experiment, mode, resolved.config.to_yaml());
  return 0;
}

int list_plugins(const std::vector<std::string>& plugin_paths) {
  const auto host = make_host(plugin_paths);
  const auto files = host.discover();
  if (files.empty()) {
    fmt::print("no plugins found; searched:\n");
    for (const auto& dir : host.search_path()) fmt::print("  {}\n", dir.string());
    return 0;
  }
  struct Row {
    std::string kind, name, version, summary, path;
  };
  std::vector<Row> rows;
  for (const auto& f : files) {
    try {
      auto lib = plugin_host::PluginLibrary::open(f.file);
      const auto& d = lib->descriptor();
      rows.push_back(
          {std::string(to_string(d.kind)), d.name, d.version, d.summary, f.file.string()});
    } catch (const std::exception& e) {
      rows.push_back({std::string(to_string(f.kind)), f.name, "-",
                      fmt::format("BROKEN: {}", e.what()), f.file.string()});
    }
  }
  // Every column as wide as its longest entry; the free-text summary last.
  Row widths{"KIND", "NAME", "VERSION", "SUMMARY", "PATH"};
  std::size_t kind_width = widths.kind.size();
  std::size_t name_width = widths.name.size();
  std::size_t version_width = widths.version.size();
  std::size_t path_width = widths.path.size();
  for (const Row& r : rows) {
    kind_width = std::max(kind_width, r.kind.size());
    name_width = std::max(name_width, r.name.size());
    version_width = std::max(version_width, r.version.size());
    path_width = std::max(path_width, r.path.size());
  }
  auto print_row = [&](const Row& r) {
    fmt::print("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", r.kind, kind_width, r.name, name_width,
               r.version, version_width, r.path, path_width, r.summary);
  };
  print_row(widths);
  for (const Row& r : rows) print_row(r);
  return 0;
}

int print_schema(const std::string& what, const std::vector<std::string>& plugin_paths) {
  if (what == "experiment") {
    fmt::print("{}", config::experiment_schema_text());
    return 0;
  }
  const auto slash = what.find('/');
  auto kind = slash == std::string::npos ? std::nullopt : parse_plugin_kind(what.substr(0, slash));
  if (!kind) {
    throw UserError(fmt::format(
        "schema: expected 'experiment' or KIND/NAME with KIND one of model, data_layer, "
        "optimizer, lr_policy, communicator; got '{}'",
        what));
  }
  auto lib = make_host(plugin_paths).open(*kind, what.substr(slash + 1));
  fmt::print("# schema of {}_params for {}\n{}", to_string(*kind), lib->describe(),
             lib->schema_text());
  return 0;
}

}  // namespace rig::cli

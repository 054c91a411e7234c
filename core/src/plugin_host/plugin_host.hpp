// Finds plugins on the search path and opens them by kind and name.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plugin_host/plugin_library.hpp"
#include "rig/plugin.hpp"

namespace rig::plugin_host {

// A plugin file found on the search path: rig-<kind>-<name>.so.
struct PluginFile {
  PluginKind kind;
  std::string name;
  std::filesystem::path file;
};

class PluginHost {
 public:
  explicit PluginHost(std::vector<std::filesystem::path> search_path);

  // --plugin-path entries (each may hold several ':'-separated folders), then
  // RIG_PLUGIN_PATH, then the plugins that came with librig: the build tree's
  // plugin folder when librig is the build tree's, else lib/rig/plugins next
  // to the installed (or bundled) librig.
  static std::vector<std::filesystem::path> default_search_path(
      const std::vector<std::string>& plugin_path_args);

  const std::vector<std::filesystem::path>& search_path() const { return search_path_; }

  // Every plugin file on the search path; the first of a (kind, name) wins.
  std::vector<PluginFile> discover() const;

  // Opens the plugin `name_or_path` of `kind`. A value with a '/' or ending
  // in ".so" is a file path; anything else a name looked up on the search
  // path. Throws UserError: unknown name (with the known names of that kind
  // and a did-you-mean), a plugin of another kind, a bad file.
  std::shared_ptr<const PluginLibrary> open(PluginKind kind, const std::string& name_or_path) const;

 private:
  std::vector<std::filesystem::path> search_path_;
};

// "rig-model-mlp.so" -> {model, "mlp"}.
std::optional<std::pair<PluginKind, std::string>> parse_plugin_file_name(const std::string& file);

}  // namespace rig::plugin_host

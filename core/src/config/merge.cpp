#include "config/merge.hpp"

namespace rig::config {

namespace {

void merge_maps(YAML::Node target, const YAML::Node& source, const std::string& target_path,
                const std::string& source_path, const SourceMap& file_sources, SourceMap& sources) {
  const YAML::Node& view = target;  // const access never inserts
  for (const auto& kv : source) {
    const std::string key = kv.first.as<std::string>();
    const std::string to = child_path(target_path, key);
    const std::string from = child_path(source_path, key);
    if (view[key] && view[key].IsMap() && kv.second.IsMap()) {
      merge_maps(target[key], kv.second, to, from, file_sources, sources);
      continue;
    }
    // Clone: the config must not share nodes with the file it came from.
    target[key] = YAML::Clone(kv.second);
    erase_subtree(sources, to);
    copy_subtree(file_sources, from, sources, to);
  }
}

}  // namespace

void merge_section(YAML::Node target, const YAML::Node& section, const std::string& section_path,
                   const SourceMap& file_sources, SourceMap& sources) {
  if (section.IsMap()) merge_maps(target, section, "", section_path, file_sources, sources);
}

}  // namespace rig::config

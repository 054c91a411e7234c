// The config one mode runs with, and where each of its values came from.
#pragma once

#include <string>

#include <yaml-cpp/yaml.h>

#include "config/source_map.hpp"

namespace rig::config {

struct ResolvedConfig {
  std::string mode;             // "train" | "eval" | "infer"
  std::string experiment_file;  // as given
  YAML::Node root;              // the merged, overridden, defaulted, validated config
  SourceMap sources;            // config path -> where its value came from

  // Where `path` came from: its own entry, else its nearest recorded ancestor
  // (at that ancestor's key, key_path extended to `path`), else just the file.
  Location where(const std::string& path) const;
  // Stable YAML: engine keys then plugin pairs in the schema's order, nested
  // map keys sorted, so equal configs print (and hash) alike.
  std::string to_yaml() const;
  // FNV-1a 64 of to_yaml(), as 16 lowercase hex digits.
  std::string hash() const;
};

// FNV-1a 64 of `text`, and the same as 16 lowercase hex digits.
std::uint64_t fnv1a64(const std::string& text);
std::string fnv1a64_hex(const std::string& text);

}  // namespace rig::config

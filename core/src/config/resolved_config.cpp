#include "config/resolved_config.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "config/experiment_schema.hpp"
#include "config/yaml_values.hpp"

namespace rig::config {

namespace {

std::vector<std::string> sorted_keys(const YAML::Node& map) {
  std::vector<std::string> keys;
  for (const auto& kv : map) keys.push_back(kv.first.as<std::string>());
  std::sort(keys.begin(), keys.end());
  return keys;
}

bool all_scalars(const YAML::Node& seq) {
  return std::all_of(seq.begin(), seq.end(),
                     [](const YAML::Node& n) { return n.IsScalar() || n.IsNull(); });
}

void emit(YAML::Emitter& out, const YAML::Node& node) {
  if (node.IsMap() && node.size() == 0) {
    out << YAML::Flow << YAML::BeginMap << YAML::EndMap;  // "{}" on the key's line
  } else if (node.IsMap()) {
    out << YAML::BeginMap;
    for (const auto& key : sorted_keys(node)) {
      out << YAML::Key << key << YAML::Value;
      emit(out, node[key]);
    }
    out << YAML::EndMap;
  } else if (node.IsSequence()) {
    // Short lists of numbers read best inline: hidden_sizes: [64, 32].
    out << (all_scalars(node) ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
    for (const auto& item : node) emit(out, item);
    out << YAML::EndSeq;
  } else if (node.IsScalar()) {
    // Keep quotes that make a string of what would otherwise read as a number.
    if (is_quoted(node)) out << YAML::DoubleQuoted;
    out << node.Scalar();
  } else {
    out << YAML::Null;
  }
}

}  // namespace

Location ResolvedConfig::where(const std::string& path) const {
  std::string rest;
  const Location* loc = find_nearest(sources, path, &rest);
  if (!loc) {
    Location out;
    out.file = experiment_file;
    out.key_path = path;
    return out;
  }
  Location out = *loc;
  if (!rest.empty()) {
    out.key_path += rest;
    out.line = out.key_line;
    out.column = out.key_column;
  }
  return out;
}

std::string ResolvedConfig::to_yaml() const {
  // Top-level order: the order of the schema's section properties.
  std::vector<std::string> order;
  const YAML::Node props = experiment_schema().at("#/definitions/section/properties");
  for (const auto& kv : props) {
    if (root[kv.first.as<std::string>()]) order.push_back(kv.first.as<std::string>());
  }
  for (const auto& key : sorted_keys(root)) {
    if (std::find(order.begin(), order.end(), key) == order.end()) order.push_back(key);
  }
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const auto& key : order) {
    out << YAML::Key << key << YAML::Value;
    emit(out, root[key]);
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string ResolvedConfig::hash() const {
  return fnv1a64_hex(to_yaml());
}

std::uint64_t fnv1a64(const std::string& text) {
  std::uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string fnv1a64_hex(const std::string& text) {
  return fmt::format("{:016x}", fnv1a64(text));
}

}  // namespace rig::config

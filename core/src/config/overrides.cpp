#include "config/overrides.hpp"

#include <vector>

#include <fmt/format.h>

#include "config/expansion_limit.hpp"
#include "config/utf8_text.hpp"
#include "config/yaml_values.hpp"
#include "rig/error.hpp"
#include "rig/utf8.hpp"

namespace rig::config {

namespace {

std::string where(const std::string& origin) {
  return fmt::format("command line ({})", origin);
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(sep, start);
    parts.push_back(text.substr(start, end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

// Splits "KEY=VALUE" into an Override whose path uses `sep` between keys.
Override parse(const std::string& body, char sep, const std::string& origin, const char* usage) {
  const std::size_t eq = body.find('=');
  if (eq == std::string::npos) {
    throw UserError(fmt::format("{}: expected {}", where(origin), usage));
  }
  const std::string key = body.substr(0, eq);
  const std::vector<std::string> parts = split(key, sep);
  for (const auto& part : parts) {
    if (part.empty()) {
      throw UserError(
          fmt::format("{}: empty key name in '{}'; expected {}", where(origin), key, usage));
    }
  }
  if (eq + 1 == body.size()) {
    throw UserError(
        fmt::format("{}: no value after '='; write '' for an empty string or null "
                    "to remove the key",
                    where(origin)));
  }
  std::string path;
  for (const auto& part : parts) path = child_path(path, part);
  return Override{path, body.substr(eq + 1), origin};
}

}  // namespace

Override parse_slash_override(const std::string& arg) {
  const std::string body = arg.rfind("--", 0) == 0 ? arg.substr(2) : arg;
  return parse(body, '/', "--" + body,
               "--KEY/SUBKEY=VALUE, e.g. --lr_policy_params/learning_rate=0.5");
}

Override parse_set_override(const std::string& arg) {
  std::string body = arg;
  for (const char* prefix : {"--set=", "--set ", "--set"}) {
    if (body.rfind(prefix, 0) == 0) {
      body = body.substr(std::string(prefix).size());
      break;
    }
  }
  const auto first = body.find_first_not_of(' ');
  body = first == std::string::npos ? std::string() : body.substr(first);
  return parse(body, '.', "--set " + body,
               "KEY=VALUE after --set, e.g. --set lr_policy_params.learning_rate=0.5");
}

void apply_override(YAML::Node root, SourceMap& sources, const Override& override) {
  const std::string origin = where(override.origin);
  // The key becomes a key of the config, which must be text like its values (check_utf8).
  if (const auto bad = first_invalid_utf8(override.path)) {
    throw UserError(fmt::format("{}: byte 0x{:02X} of the key is not UTF-8", origin,
                                static_cast<unsigned char>(override.path[*bad])));
  }
  YAML::Node value;
  try {
    value = YAML::Load(override.value);
  } catch (const YAML::Exception& e) {
    throw UserError(fmt::format("{}: the value is not valid YAML: {}", origin, e.msg));
  }
  check_expansion(value, origin);
  check_utf8(value, origin);
  const std::vector<std::string> parts = split(override.path, '.');
  YAML::Node cur = root;
  std::string path;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string& key = parts[i];
    path = child_path(path, key);
    const YAML::Node& view = cur;  // const access never inserts
    if (!view[key]) {
      if (value.IsNull()) return;  // removing a key under a map that is not there
      cur[key] = YAML::Node(YAML::NodeType::Map);
      record_origin(cur[key], path, origin, sources);
    }
    YAML::Node next = cur[key];
    if (!next.IsMap()) {
      std::string set_at;
      if (auto it = sources.find(path); it != sources.end()) {
        set_at = fmt::format(" (set at {})", it->second.describe());
      }
      throw UserError(fmt::format("{}: {}: cannot set '{}' inside {}{}: it is not a map", origin,
                                  path, parts[i + 1], describe_found(next), set_at));
    }
    cur.reset(next);
  }
  erase_subtree(sources, override.path);
  if (value.IsNull()) {
    cur.remove(parts.back());
    return;
  }
  cur[parts.back()] = value;
  record_origin(value, override.path, origin, sources);
}

}  // namespace rig::config

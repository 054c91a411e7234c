#include "config/schema_doc.hpp"

#include <algorithm>
#include <regex>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig::config {

namespace {

// A $ref chain this deep is a cycle in a broken schema.
constexpr int kMaxRefDepth = 32;

// Unescapes one JSON pointer token: ~1 is '/', ~0 is '~'.
std::string unescape_token(const std::string& token) {
  std::string out;
  for (std::size_t i = 0; i < token.size(); ++i) {
    if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
      out += token[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      out += token[i];
    }
  }
  return out;
}

bool matches_pattern(const std::string& pattern, const std::string& key) {
  try {
    return std::regex_search(key, std::regex(pattern, std::regex::ECMAScript));
  } catch (const std::regex_error&) {
    return false;
  }
}

}  // namespace

SchemaDoc::SchemaDoc(YAML::Node root, std::string what)
    : root_(std::move(root)), what_(std::move(what)) {}

YAML::Node SchemaDoc::at(const std::string& pointer) const {
  if (pointer.empty() || pointer[0] != '#') {
    throw UserError(
        fmt::format("{}: schema reference '{}' is not inside the schema (only '#/...' "
                    "references are supported)",
                    what_, pointer));
  }
  YAML::Node node = root_;
  std::size_t pos = 1;
  while (pos < pointer.size() && pointer[pos] == '/') {
    const std::size_t next = pointer.find('/', pos + 1);
    const std::string token = unescape_token(pointer.substr(pos + 1, next - pos - 1));
    const YAML::Node& cur = node;  // const access: never creates entries
    YAML::Node child;
    if (cur.IsMap() && cur[token]) {
      child = cur[token];
    } else if (cur.IsSequence() && !token.empty() &&
               std::all_of(token.begin(), token.end(),
                           [](char c) { return c >= '0' && c <= '9'; }) &&
               std::stoul(token) < cur.size()) {
      child = cur[std::stoul(token)];
    } else {
      throw UserError(fmt::format("{}: schema reference '{}' points at nothing", what_, pointer));
    }
    node.reset(child);
    if (next == std::string::npos) break;
    pos = next;
  }
  return node;
}

void SchemaDoc::expand_into(const YAML::Node& schema, SchemaSet& out, int depth) const {
  if (depth > kMaxRefDepth) {
    throw UserError(fmt::format("{}: schema has a $ref cycle", what_));
  }
  if (!schema.IsMap()) return;  // `true` / `false` schemas add nothing to walk
  if (const YAML::Node ref = schema["$ref"]) {
    expand_into(at(ref.as<std::string>()), out, depth + 1);
    return;
  }
  out.push_back(schema);
  if (const YAML::Node all = schema["allOf"]; all && all.IsSequence()) {
    for (const auto& branch : all) expand_into(branch, out, depth + 1);
  }
}

SchemaSet SchemaDoc::expand(const YAML::Node& schema) const {
  SchemaSet out;
  expand_into(schema, out, 0);
  return out;
}

SchemaSet SchemaDoc::expand(const SchemaSet& schemas) const {
  SchemaSet out;
  for (const auto& s : schemas) expand_into(s, out, 0);
  return out;
}

SchemaSet SchemaDoc::member(const SchemaSet& schemas, const std::string& key) const {
  SchemaSet out;
  for (const auto& s : schemas) {
    bool matched = false;
    if (const YAML::Node props = s["properties"]; props && props.IsMap() && props[key]) {
      expand_into(props[key], out, 0);
      matched = true;
    }
    if (const YAML::Node patterns = s["patternProperties"]; patterns && patterns.IsMap()) {
      for (const auto& kv : patterns) {
        if (matches_pattern(kv.first.as<std::string>(), key)) {
          expand_into(kv.second, out, 0);
          matched = true;
        }
      }
    }
    if (!matched) {
      if (const YAML::Node extra = s["additionalProperties"]; extra && extra.IsMap()) {
        expand_into(extra, out, 0);
      }
    }
  }
  return out;
}

SchemaSet SchemaDoc::element(const SchemaSet& schemas, std::size_t index) const {
  SchemaSet out;
  for (const auto& s : schemas) {
    const YAML::Node items = s["items"];
    if (!items) continue;
    if (items.IsMap()) {
      expand_into(items, out, 0);
    } else if (items.IsSequence() && index < items.size()) {
      expand_into(items[index], out, 0);
    }
  }
  return out;
}

std::vector<std::string> property_names(const SchemaSet& schemas) {
  std::vector<std::string> names;
  for (const auto& s : schemas) {
    const YAML::Node props = s["properties"];
    if (!props || !props.IsMap()) continue;
    for (const auto& kv : props) {
      std::string name = kv.first.as<std::string>();
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  return names;
}

bool any_has(const SchemaSet& schemas, const char* keyword) {
  return std::any_of(schemas.begin(), schemas.end(),
                     [&](const YAML::Node& s) { return static_cast<bool>(s[keyword]); });
}

}  // namespace rig::config

#include "config/source_map.hpp"

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig::config {

std::string Location::describe() const {
  if (!origin.empty()) return origin;
  if (line > 0) return fmt::format("{}:{}:{}", file, line, column);
  return file;
}

std::string Location::describe_key() const {
  if (origin.empty() && key_line > 0) return fmt::format("{}:{}:{}", file, key_line, key_column);
  return describe();
}

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string index_path(const std::string& parent, std::size_t index) {
  return fmt::format("{}[{}]", parent, index);
}

std::string parent_path(const std::string& path) {
  const auto cut = path.find_last_of(".[");
  return cut == std::string::npos ? std::string() : path.substr(0, cut);
}

bool is_within(const std::string& path, const std::string& ancestor) {
  if (ancestor.empty() || path == ancestor) return true;
  return path.size() > ancestor.size() && path.compare(0, ancestor.size(), ancestor) == 0 &&
         (path[ancestor.size()] == '.' || path[ancestor.size()] == '[');
}

const Location* find_nearest(const SourceMap& sources, const std::string& path, std::string* rest) {
  std::string probe = path;
  while (!probe.empty()) {
    if (auto it = sources.find(probe); it != sources.end()) {
      if (rest) *rest = path.substr(probe.size());
      return &it->second;
    }
    probe = parent_path(probe);
  }
  if (rest) *rest = path.empty() ? path : "." + path;
  return nullptr;
}

void erase_subtree(SourceMap& sources, const std::string& path) {
  for (auto it = sources.lower_bound(path); it != sources.end();) {
    if (it->first.compare(0, path.size(), path) != 0) break;  // past every key with this prefix
    if (is_within(it->first, path)) {
      it = sources.erase(it);
    } else {
      ++it;
    }
  }
}

void copy_subtree(const SourceMap& src, const std::string& from, SourceMap& dst,
                  const std::string& to) {
  for (auto it = src.lower_bound(from); it != src.end(); ++it) {
    if (it->first.compare(0, from.size(), from) != 0) break;
    if (!is_within(it->first, from)) continue;
    std::string rest = it->first.substr(from.size());
    if (to.empty() && !rest.empty() && rest[0] == '.') rest.erase(0, 1);
    dst[to + rest] = it->second;
  }
}

namespace {

int one_based(int zero_based) {
  return zero_based < 0 ? 0 : zero_based + 1;
}

}  // namespace

void record_file_sources(const YAML::Node& node, const std::string& file, const std::string& path,
                         const YAML::Mark& key_mark, SourceMap& out) {
  Location loc;
  loc.file = file;
  loc.key_line = one_based(key_mark.line);
  loc.key_column = one_based(key_mark.column);
  // An empty value has no position of its own worth showing: use the key's.
  const YAML::Mark value_mark = node.IsNull() ? key_mark : node.Mark();
  loc.line = one_based(value_mark.line);
  loc.column = one_based(value_mark.column);
  loc.key_path = path;
  if (!path.empty()) out[path] = loc;

  if (node.IsMap()) {
    std::map<std::string, YAML::Mark> seen;
    for (const auto& kv : node) {
      const YAML::Mark mark = kv.first.Mark();
      const std::string where =
          fmt::format("{}:{}:{}", file, one_based(mark.line), one_based(mark.column));
      if (!kv.first.IsScalar()) {
        throw UserError(fmt::format("{}: {}: keys must be plain names, found a {}", where,
                                    path.empty() ? "top level" : path,
                                    kv.first.IsMap() ? "map" : "list"));
      }
      const std::string key = kv.first.Scalar();
      const std::string key_path = child_path(path, key);
      auto [it, inserted] = seen.emplace(key, mark);
      if (!inserted) {
        throw UserError(fmt::format("{}: {}: duplicate key (first set at line {})", where, key_path,
                                    one_based(it->second.line)));
      }
      record_file_sources(kv.second, file, key_path, mark, out);
    }
  } else if (node.IsSequence()) {
    for (std::size_t i = 0; i < node.size(); ++i) {
      record_file_sources(node[i], file, index_path(path, i), node[i].Mark(), out);
    }
  }
}

void record_origin(const YAML::Node& node, const std::string& path, const std::string& origin,
                   SourceMap& out) {
  Location loc;
  loc.key_path = path;
  loc.origin = origin;
  out[path] = loc;
  if (node.IsMap()) {
    for (const auto& kv : node) {
      record_origin(kv.second, child_path(path, kv.first.as<std::string>()), origin, out);
    }
  } else if (node.IsSequence()) {
    for (std::size_t i = 0; i < node.size(); ++i) {
      record_origin(node[i], index_path(path, i), origin, out);
    }
  }
}

}  // namespace rig::config

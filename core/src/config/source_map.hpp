// Where every value of a config came from: a file position, the command line
// or a schema default. Keys are config paths: "model_params.layers[1].size".
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include <yaml-cpp/yaml.h>

namespace rig::config {

struct Location {
  std::string file;  // the experiment file as given; empty for other origins
  int line = 0;      // 1-based position of the value; 0 when unknown
  int column = 0;
  int key_line = 0;  // 1-based position of the key; 0 when unknown
  int key_column = 0;
  std::string key_path;  // the path as written in the file ("base_params.max_steps")
  std::string origin;    // "command line (--set a=1)", "schema default"; empty for a file

  // "experiments/x.yaml:12:5", "command line (--lr_policy_params/learning_rate=0.5)",
  // "schema default", or just the file when the position is unknown.
  std::string describe() const;
  // Like describe(), at the key instead of the value.
  std::string describe_key() const;
};

using SourceMap = std::map<std::string, Location>;

std::string child_path(const std::string& parent, const std::string& key);
std::string index_path(const std::string& parent, std::size_t index);
// "a.b[2]" -> "a.b", "a.b" -> "a", "a" -> "".
std::string parent_path(const std::string& path);
// Whether `path` is `ancestor` or lies below it ("" is everything's ancestor).
bool is_within(const std::string& path, const std::string& ancestor);

// The entry for `path` or for its nearest ancestor (nullptr when none). `rest`
// receives the part of `path` below the entry found (".x" or "[1].y").
const Location* find_nearest(const SourceMap& sources, const std::string& path,
                             std::string* rest = nullptr);
void erase_subtree(SourceMap& sources, const std::string& path);
// Copies the entries at and below `from` in `src` to the same places below `to`.
void copy_subtree(const SourceMap& src, const std::string& from, SourceMap& dst,
                  const std::string& to);

// Records the position of every key and value in `node`, parsed from `file`,
// under `path`. Throws UserError on a duplicate key or a key that is not a name.
void record_file_sources(const YAML::Node& node, const std::string& file, const std::string& path,
                         const YAML::Mark& key_mark, SourceMap& out);
// Records `origin` for `node` and everything below it.
void record_origin(const YAML::Node& node, const std::string& path, const std::string& origin,
                   SourceMap& out);

}  // namespace rig::config

// Command-line overrides: OpenSeq2Seq's `--lr_policy_params/learning_rate=0.5`
// and `--set lr_policy_params.learning_rate=0.5`.
#pragma once

#include <string>

#include <yaml-cpp/yaml.h>

#include "config/source_map.hpp"

namespace rig::config {

struct Override {
  std::string path;    // dotted path in the resolved config: "lr_policy_params.learning_rate"
  std::string value;   // YAML text: "0.5", "[64, 32]", "{a: 1}"; "null" removes the key
  std::string origin;  // the argument as typed: "--lr_policy_params/learning_rate=0.5"
};

// "--lr_policy_params/learning_rate=0.5" (the leading "--" is optional).
Override parse_slash_override(const std::string& arg);
// "lr_policy_params.learning_rate=0.5", also given as "--set a.b=c" or "--set=a.b=c".
Override parse_set_override(const std::string& arg);

// Sets `override.path` in `root` (a map) to the parsed value, creating the
// maps on the way; the new value replaces what was there, even a map. Records
// "command line (<origin>)" as the source. Throws UserError when the value is
// not valid YAML or a map on the way is something else.
void apply_override(YAML::Node root, SourceMap& sources, const Override& override);

}  // namespace rig::config

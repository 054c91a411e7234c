// Validation of config values against JSON Schemas (valijson), with errors
// that point into the experiment file through the source map.
#pragma once

#include <string>

#include <yaml-cpp/yaml.h>

#include "config/diagnose.hpp"
#include "config/experiment_file.hpp"
#include "config/schema_doc.hpp"
#include "config/source_map.hpp"

namespace rig::config {

// What an error message needs to say where a problem is.
struct ErrorContext {
  std::string file;                    // the experiment file
  std::string mode;                    // "train", ...; empty while checking the file as written
  std::string prefix;                  // config path of the validated value: "" or "model_params"
  std::string what;                    // "model 'mlp'" for plugin params; empty otherwise
  const SourceMap* sources = nullptr;  // config path -> where it came from
};

// Throws UserError with one message for `problem`:
// "bad.yaml:5:14: base_params.max_steps: expected integer, found 'abc'".
[[noreturn]] void throw_problem(const Problem& problem, const ErrorContext& ctx);

// Validates `data` against the schema at JSON pointer `pointer` ("#",
// "#/definitions/resolved_train") of `doc`; throws UserError on the first problem.
void validate(const SchemaDoc& doc, const std::string& pointer, const YAML::Node& data,
              const ErrorContext& ctx);

// Validates a plugin's params node against the plugin's schema (YAML text), in
// place: fills the schema's defaults first. `params_path` is the node's path
// in the config ("model_params"); `what` names the plugin ("model 'mlp'").
// A null node, or one not there yet (taken from a non-const node's
// operator[]), becomes an empty map.
void validate_plugin_params(const std::string& schema_yaml, YAML::Node& params,
                            const ResolvedConfig& cfg, const std::string& params_path,
                            const std::string& what);

}  // namespace rig::config

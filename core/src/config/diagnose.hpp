// Finds the first thing wrong with a value against a JSON Schema, walking the
// value top-down in document order, and says it in the user's terms. Covers
// the keywords configs use (type, enum, ranges, lengths, pattern, items,
// properties, additionalProperties, required, dependencies, oneOf of
// required); anything else is left to valijson's own description.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/schema_doc.hpp"

namespace rig::config {

struct Problem {
  enum class Kind {
    unknown_key,  // path: the key; detail: "; did you mean 'x'?" or "; allowed keys: ..."
    bad_value,    // path: the value; detail: "expected integer, found 'abc'"
    missing_key,  // path: the object; keys: {the missing key}
    dependency,   // path: the key present; keys: {the key it needs}
    exactly_one,  // path: the object; keys: the alternatives; present: those set
    other,        // path: the value; detail: free text
  };
  Kind kind = Kind::other;
  std::string path;  // relative to the value validated: "max_steps", "layers[1].size"
  std::string detail;
  std::vector<std::string> keys;
  std::vector<std::string> present;
};

std::optional<Problem> find_problem(const SchemaDoc& doc, const YAML::Node& schema,
                                    const YAML::Node& data);

}  // namespace rig::config

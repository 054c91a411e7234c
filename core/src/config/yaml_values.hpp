// How config values read as JSON Schema types. YAML scalars carry no type of
// their own, so a plain scalar's text decides; a quoted scalar is a string.
#pragma once

#include <optional>
#include <string>

#include <yaml-cpp/yaml.h>

namespace rig::config {

bool is_quoted(const YAML::Node& scalar);
std::optional<long long> as_integer(const YAML::Node& node);  // plain, whole text an integer
std::optional<double> as_number(const YAML::Node& node);      // plain, whole text a finite number
std::optional<bool> as_boolean(const YAML::Node& node);       // plain true / false

// Whether `node` is of JSON Schema type `type` ("integer", "object", ...).
bool has_type(const YAML::Node& node, const std::string& type);
// "integer", "a map", "boolean (true or false)", ...: a type as a message says it.
std::string type_phrase(const std::string& type);
// The value as a message shows it after "found": 'abc', string '100', a map, nothing.
std::string describe_found(const YAML::Node& node);

}  // namespace rig::config

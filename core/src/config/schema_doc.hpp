// A JSON Schema document (written as YAML) for walking by hand: finding the
// schemas that apply to a value, for defaults and for error messages.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace rig::config {

using SchemaSet = std::vector<YAML::Node>;

class SchemaDoc {
 public:
  // `what` names the schema in errors about the schema itself ("model 'mlp'").
  SchemaDoc(YAML::Node root, std::string what);

  const YAML::Node& root() const { return root_; }
  const std::string& what() const { return what_; }

  // The schema at a JSON pointer inside this document ("#", "#/definitions/x").
  YAML::Node at(const std::string& pointer) const;
  // `schema` with every $ref followed and every allOf branch added: all the
  // schemas a value must satisfy at once.
  SchemaSet expand(const YAML::Node& schema) const;
  SchemaSet expand(const SchemaSet& schemas) const;
  // The expanded schemas for member `key` of an object / element `index` of
  // an array that `schemas` (expanded) describe.
  SchemaSet member(const SchemaSet& schemas, const std::string& key) const;
  SchemaSet element(const SchemaSet& schemas, std::size_t index) const;

 private:
  void expand_into(const YAML::Node& schema, SchemaSet& out, int depth) const;

  YAML::Node root_;
  std::string what_;
};

// The names declared under `properties` by `schemas`, in order, without repeats.
std::vector<std::string> property_names(const SchemaSet& schemas);
// Whether any schema in the set has `keyword`.
bool any_has(const SchemaSet& schemas, const char* keyword);

}  // namespace rig::config

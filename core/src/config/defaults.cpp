#include "config/defaults.hpp"

namespace rig::config {

namespace {

constexpr const char* kSchemaDefault = "schema default";

void fill(const SchemaDoc& doc, const SchemaSet& set, YAML::Node data, const std::string& path,
          SourceMap* sources);

// Whether an absent map described by `set` should be created to hold defaults.
bool creatable(const SchemaSet& set) {
  bool object = false;
  for (const auto& s : set) {
    if (s["required"]) return false;
    const YAML::Node type = s["type"];
    object = object || (type && type.IsScalar() && type.Scalar() == "object") || s["properties"];
  }
  return object;
}

void fill(const SchemaDoc& doc, const SchemaSet& set, YAML::Node data, const std::string& path,
          SourceMap* sources) {
  const YAML::Node& view = data;  // const access never inserts
  if (data.IsMap()) {
    for (const auto& name : property_names(set)) {
      const SchemaSet member = doc.member(set, name);
      const std::string member_path = child_path(path, name);
      if (view[name]) {
        fill(doc, member, data[name], member_path, sources);
        continue;
      }
      YAML::Node value;
      bool has_default = false;
      for (const auto& s : member) {
        if (s["default"]) {
          value.reset(YAML::Clone(s["default"]));
          has_default = true;
          break;
        }
      }
      if (!has_default) {
        if (!creatable(member)) continue;
        YAML::Node created(YAML::NodeType::Map);
        fill(doc, member, created, member_path, nullptr);
        if (created.size() == 0) continue;
        value.reset(created);
      }
      data[name] = value;
      if (sources) record_origin(value, member_path, kSchemaDefault, *sources);
    }
  } else if (data.IsSequence()) {
    for (std::size_t i = 0; i < data.size(); ++i) {
      fill(doc, doc.element(set, i), data[i], index_path(path, i), sources);
    }
  }
}

}  // namespace

void fill_defaults(const SchemaDoc& doc, const YAML::Node& schema, YAML::Node data,
                   const std::string& path, SourceMap* sources) {
  fill(doc, doc.expand(schema), data, path, sources);
}

}  // namespace rig::config

#include "config/experiment_schema.hpp"

namespace rig::config {

const SchemaDoc& experiment_schema() {
  static const SchemaDoc doc(YAML::Load(experiment_schema_text()), "the experiment schema");
  return doc;
}

}  // namespace rig::config

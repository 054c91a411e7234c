// The experiment schema (schemas/experiment.yaml), compiled into librig.
#pragma once

#include "config/schema_doc.hpp"

namespace rig::config {

// The text of schemas/experiment.yaml (generated from experiment_schema.cpp.in).
const char* experiment_schema_text();
// That text, parsed once.
const SchemaDoc& experiment_schema();

}  // namespace rig::config

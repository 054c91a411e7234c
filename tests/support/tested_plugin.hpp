// The plugin that tests/support/plugin_descriptor_test.cpp (compiled once)
// checks in an in-tree plugin's test executable: rig_add_plugin_test defines
// these two in a file it generates for that executable.
#pragma once

namespace rig_test {
extern const char* const kTestedPluginKind;
extern const char* const kTestedPluginName;
}  // namespace rig_test

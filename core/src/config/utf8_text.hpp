// Every scalar of a config document (keys included) must be UTF-8 before the
// schema validator sees it: valijson's string length (minLength / maxLength)
// reads past its own table on a run of continuation bytes (found by
// tests/fuzz/fuzz_experiment), and a message quoting such a value would not be
// text either.
#pragma once

#include <string>

#include <yaml-cpp/yaml.h>

namespace rig::config {

// Throws UserError naming `where`, the line and column of the first scalar
// that is not UTF-8, and the byte. Walks every node: call it after
// check_expansion, which bounds how many there are.
void check_utf8(const YAML::Node& root, const std::string& where);

}  // namespace rig::config

// Error types. Their class decides the exit code of the `rig` command:
// UserError (bad input: config, files, usage) exits 2, anything else exits 1.
#pragma once

#include <stdexcept>
#include <string>

#include "rig/export.hpp"

namespace rig {

// Something the user can fix: a bad experiment file, a missing file, a bad
// plugin. The message says what to fix (file, line, key, expected vs found).
class RIG_API UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failure while running that is not the user's input (exit code 1).
class RIG_API RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace rig

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

// A device (or the host) could not give a tensor its memory: too large a
// batch for the machine, as a rule, so the user's to fix (exit 2). The
// message grows as it rises: the tensor layer says what did not fit and what
// the device held (`facts`), the engine where that happened (`where`: "the
// backward pass of step 1") and what to change (`advice`).
class RIG_API OutOfMemoryError : public UserError {
 public:
  OutOfMemoryError(std::string device, std::string facts, std::string where = {},
                   std::string advice = {});
  // The same facts, with `where` (unless one is known already: the innermost
  // wins) and `advice` (appended).
  OutOfMemoryError within(const std::string& where, const std::string& advice) const;
  const std::string& device() const { return device_; }
  const std::string& where() const { return where_; }

 private:
  std::string device_, facts_, where_, advice_;
};

// A failure while running that is not the user's input (exit code 1).
class RIG_API RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace rig

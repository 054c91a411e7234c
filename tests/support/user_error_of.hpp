// Test helper: the message of the rig::UserError a callable throws.
#pragma once

#include <string>

#include "rig/error.hpp"

namespace rig_test {

// The UserError message `f` throws, or "<no error>".
template <class F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const rig::UserError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace rig_test

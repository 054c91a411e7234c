// Small helpers shared by the tensor and plugin unit tests.
#pragma once

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace rig_test {

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

// The message of the `E` that f() throws, or a note that it threw none.
template <class E = std::invalid_argument, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(nothing of the expected type was thrown)";
}

}  // namespace rig_test

// What the engine is doing on this thread, for the messages of errors that
// rise from below it: an allocation that failed knows its size, not that it
// was the backward pass of step 12. Scopes nest; the innermost is current.
// A scope left by an exception remembers itself (the innermost such) for
// the handler that catches it outside every scope: activity_that_failed().
// The storages allocated in a scope are counted under its `what` (a
// MemoryLabel), for the picture of the peak memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "rig/memory_labels.hpp"

namespace rig::engine {

class ActivityScope {
 public:
  // `what` outlives the scope (a literal): "the forward pass", "evaluation".
  explicit ActivityScope(const char* what, std::optional<std::int64_t> step = std::nullopt);
  ~ActivityScope();
  ActivityScope(const ActivityScope&) = delete;
  ActivityScope& operator=(const ActivityScope&) = delete;

 private:
  const char* previous_what_;
  std::optional<std::int64_t> previous_step_;
  int uncaught_;
  MemoryLabel label_;
};

// "the backward pass of step 12", "evaluation"; empty outside every scope.
std::string current_activity();
// The innermost scope an exception left since the last scope began (and
// forgets it); empty when none.
std::string activity_that_failed();

}  // namespace rig::engine

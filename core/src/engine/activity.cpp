#include "engine/activity.hpp"

#include <exception>

#include <fmt/format.h>

namespace rig::engine {

namespace {

struct Activity {
  const char* what = nullptr;
  std::optional<std::int64_t> step;
};

thread_local Activity current;
thread_local Activity failed;  // set while unwinding: no allocation there

std::string describe(const Activity& a) {
  if (a.what == nullptr) return {};
  return a.step ? fmt::format("{} of step {}", a.what, *a.step) : std::string(a.what);
}

}  // namespace

ActivityScope::ActivityScope(const char* what, std::optional<std::int64_t> step)
    : previous_what_(current.what),
      previous_step_(current.step),
      uncaught_(std::uncaught_exceptions()),
      label_(what) {
  failed = {};  // a failure before this scope began was handled
  current = {what, step};
}

ActivityScope::~ActivityScope() {
  if (std::uncaught_exceptions() > uncaught_ && failed.what == nullptr) failed = current;
  current = {previous_what_, previous_step_};
}

std::string current_activity() {
  return describe(current);
}

std::string activity_that_failed() {
  const std::string text = describe(failed);
  failed = {};
  return text;
}

}  // namespace rig::engine

#include "launch/test_faults.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace rig::launch {
namespace {

struct Faults {
  std::optional<std::int64_t> crash_at_step;
  std::optional<int> crash_rank;
  std::optional<std::int64_t> kill_in_checkpoint;
  std::int64_t step_sleep_ms = 0;
  std::string once;
};

Faults parse_faults() {
  Faults faults;
  const char* env = std::getenv("RIG_TEST_FAULT");
  if (env == nullptr) return faults;
  std::stringstream items(env);
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = item.substr(0, eq);
    if (key == "once") faults.once = item.substr(eq + 1);
    const std::int64_t value = std::strtoll(item.c_str() + eq + 1, nullptr, 10);
    if (key == "crash_at_step") faults.crash_at_step = value;
    if (key == "crash_rank") faults.crash_rank = static_cast<int>(value);
    if (key == "kill_in_checkpoint") faults.kill_in_checkpoint = value;
    if (key == "step_sleep_ms") faults.step_sleep_ms = value;
  }
  return faults;
}

const Faults& faults() {
  static const Faults parsed = parse_faults();
  return parsed;
}

void die() {
  if (!faults().once.empty()) {
    // O_EXCL: of several ranks reaching the fault together, one fires it.
    const int fd = ::open(faults().once.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return;
    ::close(fd);
  }
  ::kill(::getpid(), SIGKILL);
  std::_Exit(137);  // not reached
}

}  // namespace

void test_fault_after_step(std::int64_t step, int rank) {
  const Faults& f = faults();
  if (f.step_sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.step_sleep_ms));
  if (f.crash_at_step && *f.crash_at_step == step && (!f.crash_rank || *f.crash_rank == rank)) {
    die();
  }
}

void test_fault_in_checkpoint_write(std::int64_t step) {
  const Faults& f = faults();
  if (f.kill_in_checkpoint && *f.kill_in_checkpoint == step) die();
}

}  // namespace rig::launch

#include "watchdog.hpp"

#include <utility>

namespace rig_mpi {

Watchdog::Watchdog(std::function<void(std::uint64_t)> on_expiry)
    : on_expiry_(std::move(on_expiry)), thread_([this] { loop(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void Watchdog::arm(Clock::time_point deadline, std::uint64_t seq) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    deadline_ = deadline;
    seq_ = seq;
    // Deadlines only grow: a thread already sleeping until an earlier one
    // wakes by itself and re-reads, so most arms cost no wake-up.
    wake = !sleeping_until_ || deadline < *sleeping_until_;
  }
  if (wake) changed_.notify_all();
}

void Watchdog::disarm() {
  std::lock_guard lock(mutex_);
  deadline_.reset();
}

void Watchdog::loop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (!deadline_) {
      sleeping_until_.reset();
      changed_.wait(lock);
      continue;
    }
    const auto deadline = *deadline_;
    if (Clock::now() < deadline) {
      sleeping_until_ = deadline;
      changed_.wait_until(lock, deadline);
      sleeping_until_.reset();
      continue;  // re-read: disarmed, re-armed or stopped meanwhile
    }
    const auto seq = seq_;
    lock.unlock();
    on_expiry_(seq);  // does not return
    lock.lock();
  }
}

}  // namespace rig_mpi

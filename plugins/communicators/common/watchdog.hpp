// Ends the job when a blocking MPI call (which cannot be polled) runs past its
// deadline: a thread that sleeps until the armed deadline and then calls the
// expiry handler, unless the call has finished and disarmed it by then.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace rig_mpi {

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // on_expiry(seq) runs on the watchdog thread and must not return (it aborts).
  explicit Watchdog(std::function<void(std::uint64_t seq)> on_expiry);
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog();

  void arm(Clock::time_point deadline, std::uint64_t seq);
  void disarm();

 private:
  void loop();

  std::function<void(std::uint64_t)> on_expiry_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Clock::time_point> deadline_;
  std::optional<Clock::time_point> sleeping_until_;  // the watchdog thread's wake-up time
  std::uint64_t seq_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace rig_mpi

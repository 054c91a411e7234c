// The state one collective shares between the thread that issued it (which
// waits on it) and the communication thread (which runs it and completes it).
#pragma once

#include <atomic>
#include <string>

#include "rig/communicator.hpp"

namespace rig_mpi {

struct RequestState {
  enum Status : int { pending = 0, succeeded = 1, failed = 2 };

  // Written by the communication thread before `status` leaves pending, read
  // by the waiter after it has seen that (release / acquire on `status`).
  rig::CommTiming timing;
  std::string error;
  std::atomic<int> status{pending};

  void complete(Status final_status) {
    status.store(final_status, std::memory_order_release);
    status.notify_all();
  }
};

}  // namespace rig_mpi

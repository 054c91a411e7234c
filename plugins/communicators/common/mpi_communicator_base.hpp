// The collectives of the MPI-based communicators (`mpi`, and `mpi_ps`'s
// workers): each one's arguments are checked on the calling thread, then
// handed to the communication thread (comm_thread.hpp), which runs them in
// issue order. A collective on a device buffer runs on a host copy.
#pragma once

#include <memory>
#include <string>

#include "comm_thread.hpp"
#include "rig/communicator.hpp"

namespace rig_mpi {

class MpiCommunicatorBase : public rig::Communicator {
 public:
  // `servers`: see CommThread.
  MpiCommunicatorBase(double timeout_s, double startup_timeout_s, int servers = 0);

  int rank() const override { return thread_.rank(); }
  int size() const override { return thread_.size(); }
  int local_rank() const override { return thread_.local_rank(); }
  std::unique_ptr<rig::CommRequest> allreduce(rig::Tensor buffer, rig::ReduceOp op) override;
  std::unique_ptr<rig::CommRequest> broadcast(rig::Tensor buffer, int root) override;
  std::unique_ptr<rig::CommRequest> allgather(rig::Tensor input, rig::Tensor output) override;
  void barrier() override;
  [[noreturn]] void abort(const std::string& reason, int exit_code) override;

 protected:
  CommThread& thread() { return thread_; }

 private:
  // One per process: the first one's thread starts and finalizes MPI, which
  // cannot start again.
  struct InstanceGuard {
    InstanceGuard();
    InstanceGuard(const InstanceGuard&) = delete;
    InstanceGuard& operator=(const InstanceGuard&) = delete;
    ~InstanceGuard();
  };

  std::unique_ptr<rig::CommRequest> issue(Collective c, rig::Tensor buffer, rig::Tensor input,
                                          rig::Tensor device_result = {});

  InstanceGuard guard_;
  CommThread thread_;
};

}  // namespace rig_mpi

// The communication thread: the only thread that calls MPI (besides the
// watchdog's and abort()'s MPI_Abort under MPI_THREAD_MULTIPLE). It starts MPI
// when the host has not (and finalizes it at the end), runs the collectives
// FIFO in issue order, and ends the job when one outlives its deadline.
//
// Each collective first waits, polling MPI_Ibarrier with back-off, until every
// rank has issued it (no core burnt while a slow rank computes; the deadline
// is checked between polls), then runs MPI's blocking collective: measured
// faster than MPI_Iallreduce + MPI_Test (Open MPI 4.1's nonblocking allreduce
// reached about 60% of the blocking one's bandwidth). The watchdog covers the
// blocking call.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <mpi.h>

#include "collective.hpp"
#include "rank_census.hpp"
#include "watchdog.hpp"

namespace rig_mpi {

class CommThread {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the thread and waits until MPI is set up; throws rig::RunError when
  // it cannot be. Every rank must issue a collective within timeout_s of this
  // rank issuing it, but the first: ranks start apart (MPI start-up, loading
  // data, building the model), so they meet there within startup_timeout_s.
  //
  // `servers` > 0 (the mpi_ps communicator): the last `servers` processes of
  // MPI_COMM_WORLD are a group of their own, and the collectives span this
  // process's group; ps_comm() then spans every process, for the parameter
  // server's messages (which need MPI_THREAD_MULTIPLE).
  CommThread(double timeout_s, double startup_timeout_s, int servers = 0);
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;
  // Runs what is queued, meets every rank in a last barrier, frees the MPI
  // objects and finalizes MPI if this thread started it.
  ~CommThread();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  MPI_Comm ps_comm() const { return ps_comm_; }
  bool thread_multiple() const { return thread_level_ == MPI_THREAD_MULTIPLE; }

  // Queues `op` (numbering it) and returns its state.
  std::shared_ptr<RequestState> submit(Collective op);

  // Prints `reason` naming this rank and ends every rank's job with `exit_code`.
  [[noreturn]] void abort(const std::string& reason, int exit_code);

 private:
  void main(std::promise<void> ready);
  void set_up();
  void loop();
  void execute(Collective& op);
  // MPI_SUCCESS once every rank has issued `op`; does not return at its deadline.
  int wait_for_every_rank(const Collective& op, Clock::time_point start);
  // How long every rank has to issue `op`, and the key that sets it.
  Clock::duration arrival_limit(const Collective& op) const;
  double arrival_limit_s(const Collective& op) const;
  const char* arrival_limit_key(const Collective& op) const;
  void tear_down();
  void check_abort_request();
  [[noreturn]] void timed_out(const Collective& op, Clock::time_point start, bool from_watchdog);
  [[noreturn]] void end_job(bool from_watchdog, int exit_code);

  const Clock::duration timeout_;
  const double timeout_s_;
  const Clock::duration startup_timeout_;
  const double startup_timeout_s_;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  const int servers_;
  int world_rank_ = 0;
  int world_size_ = 1;
  MPI_Comm ps_comm_ = MPI_COMM_NULL;
  int thread_level_ = MPI_THREAD_SINGLE;
  bool owns_mpi_ = false;
  MPI_Comm local_ = MPI_COMM_NULL;
  MpiResources mpi_;
  std::unique_ptr<RankCensus> census_;
  std::string failure_;  // set when a collective failed: later ones fail at once

  // The collective being run, for the watchdog's message.
  std::mutex running_mutex_;
  Collective running_;
  Clock::time_point running_start_;

  std::mutex queue_mutex_;
  std::condition_variable queue_changed_;
  std::deque<Collective> queue_;
  std::uint64_t issued_ = 0;
  bool stopping_ = false;
  std::atomic<bool> abort_requested_{false};
  std::atomic<int> abort_exit_code_{1};

  Watchdog watchdog_;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace rig_mpi

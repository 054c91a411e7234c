// The parameter server's messages over MPI: a thread of its own that sends
// (MPI_Isend) what the engine queues and receives (MPI_Improbe + MPI_Mrecv)
// whatever arrives, into an inbox the engine waits on. When there is nothing
// to do it sleeps in short, growing steps instead of spinning, so idle
// servers leave their cores to the workers. Needs MPI_THREAD_MULTIPLE: the
// communication thread runs the workers' collectives at the same time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "rig/parameter_server.hpp"

namespace rig_mpi {

class PsLink final : public rig::ParameterServerTransport {
 public:
  // `comm` spans every process, workers first; collective (it gathers who is where).
  PsLink(MPI_Comm comm, int servers, rig::PsSettings settings);
  PsLink(const PsLink&) = delete;
  PsLink& operator=(const PsLink&) = delete;
  // Sends what is queued, then stops the thread.
  ~PsLink() override;

  int workers() const override { return size_ - servers_; }
  int servers() const override { return servers_; }
  int self() const override { return rank_; }
  std::string describe(int process) const override;
  const rig::PsSettings& settings() const override { return settings_; }
  void send(rig::PsMessage message) override;
  std::optional<rig::PsMessage> receive(std::chrono::milliseconds timeout) override;
  void flush() override;

 private:
  struct Outgoing {
    std::vector<std::byte> bytes;  // header, then payload
    MPI_Request request = MPI_REQUEST_NULL;
  };
  void main();
  bool start_sends();
  bool finish_sends();
  bool receive_one();
  void fail(const std::string& what, std::exception_ptr failure);
  [[noreturn]] void throw_failure() const;  // mutex_ held, error_ set

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  const int servers_;
  const rig::PsSettings settings_;
  std::vector<std::string> where_;  // per process: "pid 1234 on host a"

  std::mutex mutex_;
  std::condition_variable sent_or_queued_;  // the thread and flush() wait on it
  std::condition_variable arrived_;         // receive() waits on it
  std::deque<rig::PsMessage> outbox_;
  std::deque<rig::PsMessage> inbox_;
  std::size_t in_flight_ = 0;  // sends started, not finished
  std::string error_;
  std::exception_ptr failure_;  // what the thread caught, for a user's error to reach the engine
  bool stopping_ = false;
  std::list<Outgoing> sending_;  // the thread's own
  std::thread thread_;
};

}  // namespace rig_mpi

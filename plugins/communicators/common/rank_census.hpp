// Who the other ranks are (pid and host, gathered at start) and how far each
// rank on this host has got (a counter per rank in node-shared memory), so a
// timed-out collective can say which rank did not take part. Reading them
// needs no MPI call: the watchdog thread may do it while MPI is stuck.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

namespace rig_mpi {

class RankCensus {
 public:
  // Collective over `comm` (every rank) and `local` (the ranks of this host,
  // from MPI_Comm_split_type SHARED); on the communication thread.
  RankCensus(MPI_Comm comm, MPI_Comm local);
  RankCensus(const RankCensus&) = delete;
  RankCensus& operator=(const RankCensus&) = delete;
  ~RankCensus();

  // Collective over `local`: before the communicators are freed.
  void release();

  // This rank has started collective `seq` (a store into shared memory).
  void announce(std::uint64_t seq);

  // Why collective `seq` may not have finished, from what this host can see:
  // "rank 1 (pid 1234 on host a) is gone", "... is stopped", "... has not
  // started it (its last collective was #56)", or that no rank here is at fault.
  std::string absent_ranks(std::uint64_t seq) const;

  // "rank 0 (pid 1233 on host a)": `rank` in the census's communicator, named
  // by its rank in the job (a parameter server's rank among the servers
  // differs from the one mpirun gave it, which is the one users see).
  std::string describe(int rank) const;
  // The line a rank prints as it ends the job: "rig: mpi: rank 0 (pid 1233
  // on host a): REASON; ending the job" (`who`: mpi or nccl), REASON's final
  // period dropped.
  std::string ending_line(const char* who, int rank, const std::string& reason) const;
  int host_count() const;

 private:
  struct Peer {
    long pid = 0;
    int job_rank = 0;
    std::string host;
    std::uint64_t* started = nullptr;  // in the shared window; nullptr: not on this host
  };
  int rank_ = 0;
  std::vector<Peer> peers_;  // by rank
  MPI_Win window_ = MPI_WIN_NULL;
  std::uint64_t* mine_ = nullptr;
};

}  // namespace rig_mpi

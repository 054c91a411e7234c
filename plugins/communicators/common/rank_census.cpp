#include "rank_census.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace rig_mpi {
namespace {

struct Identity {
  std::int64_t pid;
  std::int64_t job_rank;  // in MPI_COMM_WORLD: what mpirun and its messages call the process
  char host[64];
};

Identity my_identity() {
  Identity me{};
  me.pid = static_cast<std::int64_t>(::getpid());
  int job_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &job_rank);
  me.job_rank = job_rank;
  if (::gethostname(me.host, sizeof(me.host) - 1) != 0) std::strcpy(me.host, "?");
  me.host[sizeof(me.host) - 1] = '\0';
  return me;
}

bool process_is_gone(long pid) {
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// The state letter of /proc/PID/stat (Linux): 'T' stopped, 'Z' exited but not
// yet reaped, ...; '?' where there is no /proc.
char process_state(long pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return '?';
  const auto paren = line.rfind(')');  // the command name may hold spaces and ')'
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : '?';
}

}  // namespace

RankCensus::RankCensus(MPI_Comm comm, MPI_Comm local) {
  int size = 1;
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size);
  const Identity me = my_identity();
  std::vector<Identity> all(static_cast<std::size_t>(size));
  MPI_Allgather(&me, sizeof(Identity), MPI_BYTE, all.data(), sizeof(Identity), MPI_BYTE, comm);
  peers_.resize(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) {
    peers_[r].pid = static_cast<long>(all[r].pid);
    peers_[r].job_rank = static_cast<int>(all[r].job_rank);
    peers_[r].host = all[r].host;
  }

  // One started-counter per rank of this host, in memory they all map. Without
  // it (a transport that cannot share memory) only "is gone" can be told.
  void* base = nullptr;
  if (MPI_Win_allocate_shared(sizeof(std::uint64_t), sizeof(std::uint64_t), MPI_INFO_NULL, local,
                              &base, &window_) != MPI_SUCCESS) {
    window_ = MPI_WIN_NULL;
    return;
  }
  mine_ = static_cast<std::uint64_t*>(base);
  std::atomic_ref<std::uint64_t>(*mine_).store(0, std::memory_order_relaxed);
  int local_size = 1;
  MPI_Comm_size(local, &local_size);
  MPI_Group local_group = MPI_GROUP_NULL;
  MPI_Group group = MPI_GROUP_NULL;
  MPI_Comm_group(local, &local_group);
  MPI_Comm_group(comm, &group);
  for (int l = 0; l < local_size; ++l) {
    MPI_Aint bytes = 0;
    int unit = 0;
    void* slot = nullptr;
    int r = MPI_UNDEFINED;
    MPI_Win_shared_query(window_, l, &bytes, &unit, &slot);
    MPI_Group_translate_ranks(local_group, 1, &l, group, &r);
    if (r != MPI_UNDEFINED && slot != nullptr) {
      peers_[static_cast<std::size_t>(r)].started = static_cast<std::uint64_t*>(slot);
    }
  }
  MPI_Group_free(&local_group);
  MPI_Group_free(&group);
  MPI_Barrier(local);  // every counter is zeroed before anyone reads one
}

RankCensus::~RankCensus() = default;

void RankCensus::release() {
  if (window_ != MPI_WIN_NULL) MPI_Win_free(&window_);
  mine_ = nullptr;
  for (auto& peer : peers_) peer.started = nullptr;
}

void RankCensus::announce(std::uint64_t seq) {
  if (mine_ != nullptr)
    std::atomic_ref<std::uint64_t>(*mine_).store(seq, std::memory_order_relaxed);
}

std::string RankCensus::describe(int rank) const {
  const auto& peer = peers_.at(static_cast<std::size_t>(rank));
  return fmt::format("rank {} (pid {} on host {})", peer.job_rank, peer.pid, peer.host);
}

std::string RankCensus::ending_line(const char* who, int rank, const std::string& reason) const {
  std::string_view why = reason;
  if (why.ends_with('.')) why.remove_suffix(1);
  return fmt::format("rig: {}: {}: {}; ending the job", who, describe(rank), why);
}

int RankCensus::host_count() const {
  std::set<std::string> hosts;
  for (const auto& peer : peers_) hosts.insert(peer.host);
  return static_cast<int>(hosts.size());
}

std::string RankCensus::absent_ranks(std::uint64_t seq) const {
  const auto& my_host = peers_.at(static_cast<std::size_t>(rank_)).host;
  std::vector<std::string> findings;
  int elsewhere = 0;
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r) {
    if (r == rank_) continue;
    const auto& peer = peers_[static_cast<std::size_t>(r)];
    if (peer.host != my_host) {
      ++elsewhere;
      continue;
    }
    const char state = process_state(peer.pid);
    if (process_is_gone(peer.pid) || state == 'Z' || state == 'X') {
      findings.push_back(describe(r) + " is gone");
    } else if (state == 'T' || state == 't') {
      findings.push_back(describe(r) + " is stopped (SIGSTOP, or a debugger)");
    } else if (peer.started != nullptr) {
      const auto last =
          std::atomic_ref<std::uint64_t>(*peer.started).load(std::memory_order_relaxed);
      if (last < seq) {
        findings.push_back(fmt::format(
            "{} is alive but has not started it (its last collective was #{})", describe(r), last));
      }
    }
  }
  if (!findings.empty()) return fmt::format("{}", fmt::join(findings, "; "));
  // Without the shared counters only a rank that is gone can be told.
  const char* nothing_here = window_ != MPI_WIN_NULL ? "gone or behind" : "gone";
  if (elsewhere > 0) {
    return fmt::format(
        "no rank on this host is {}; one of the {} rank(s) on other hosts, or the network, is "
        "stuck",
        nothing_here, elsewhere);
  }
  return fmt::format("no rank is {}; MPI itself is stuck", nothing_here);
}

}  // namespace rig_mpi

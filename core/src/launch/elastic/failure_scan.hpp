// What ended a job, read from the lines mpirun and rig's ranks print: which
// rank died (its slot is left out) or which host was lost (all of it is).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace rig::launch::elastic {

struct Failure {
  enum class Kind { rank, hosts, unknown };
  Kind kind = Kind::unknown;
  int rank = -1;                   // Kind::rank
  std::vector<std::string> hosts;  // Kind::hosts: every host to leave out
  std::string evidence;            // the line it was read from
};

class FailureScan {
 public:
  // Any line of the job's output; returns true when the line is the first
  // sign of a failure (the supervisor's teardown clock starts then).
  bool feed(std::string_view line);
  bool failing() const { return failing_; }
  // The verdict once the job has ended. `rank_hosts[r]` is rank r's host as
  // the supervisor placed it.
  Failure verdict(const std::vector<std::string>& rank_hosts) const;

 private:
  bool failing_ = false;
  std::optional<Failure> signalled_;    // mpirun: rank R exited on signal S
  std::optional<Failure> lost_daemon_;  // mpirun: lost its daemon on host H
  std::optional<Failure> gone_;         // rig's watchdog: rank R is gone
  std::optional<Failure> exited_;       // mpirun: the first rank to exit non-zero
  std::set<int> complaining_ranks_;     // rig's watchdog: the stuck ranks are on other hosts
  std::string complaint_;
  bool in_exit_report_ = false;
  int exit_report_rank_ = -1;
};

}  // namespace rig::launch::elastic

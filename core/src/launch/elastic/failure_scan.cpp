#include "launch/elastic/failure_scan.hpp"

#include <regex>

namespace rig::launch::elastic {
namespace {

// Open MPI 4's words (orterun's help-errmgr-base.txt), and rig's watchdog's
// (plugins/communicators/common: "rig: mpi: rank R (pid P on host H): ...").
const std::regex kSignalled(R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal)");
const std::regex kLostDaemon(R"(Remote daemon: \S+ on node (\S+))");
const std::regex kOrteLost(R"(ORTE has lost communication with a remote daemon)");
const std::regex kProcessName(R"(Process name: \[\[\d+,\d+\],(\d+)\])");
const std::regex kExitCode(R"(Exit code:\s+(\d+))");
const std::regex kRigWatchdog(R"(rig: mpi: rank (\d+) \(pid \d+ on host (\S+)\): (.*))");
const std::regex kGone(R"(rank (\d+) \(pid \d+ on host \S+\) is gone)");
const std::regex kMpiAbort(R"(MPI_ABORT was invoked on rank (\d+))");
const std::regex kNonZero(R"(mpirun detected that one or more processes exited with non-zero)");

}  // namespace

bool FailureScan::feed(std::string_view text) {
  const std::string line(text);
  std::smatch m;
  bool sign = false;
  if (std::regex_search(line, m, kSignalled)) {
    if (!signalled_) signalled_ = Failure{Failure::Kind::rank, std::stoi(m[1]), {}, line};
    sign = true;
  } else if (std::regex_search(line, m, kLostDaemon)) {
    if (!lost_daemon_) lost_daemon_ = Failure{Failure::Kind::hosts, -1, {m[1]}, line};
    sign = true;
  } else if (std::regex_search(line, kOrteLost) || std::regex_search(line, kNonZero) ||
             std::regex_search(line, kMpiAbort)) {
    sign = true;
  } else if (std::regex_search(line, m, kRigWatchdog)) {
    const std::string what = m[3];
    std::smatch gone;
    if (std::regex_search(what, gone, kGone)) {
      if (!gone_) gone_ = Failure{Failure::Kind::rank, std::stoi(gone[1]), {}, line};
    } else if (what.find("on other hosts, or the network, is stuck") != std::string::npos) {
      complaining_ranks_.insert(std::stoi(m[1]));
      if (complaint_.empty()) complaint_ = line;
    }
    sign = true;
  }
  // The non-zero exit report spans lines: "Process name: [[J,1],R]" then "Exit code: C".
  if (std::regex_search(line, m, kProcessName)) {
    in_exit_report_ = true;
    exit_report_rank_ = std::stoi(m[1]);
  } else if (in_exit_report_ && std::regex_search(line, m, kExitCode)) {
    in_exit_report_ = false;
    if (!exited_) {
      exited_ = Failure{
          Failure::Kind::rank,
          exit_report_rank_,
          {},
          "rank " + std::to_string(exit_report_rank_) + " exited with " + std::string(m[1])};
    }
  }
  const bool first = sign && !failing_;
  failing_ = failing_ || sign;
  return first;
}

Failure FailureScan::verdict(const std::vector<std::string>& rank_hosts) const {
  // A rank killed by a signal, or a daemon lost, is the cause; a rank that
  // exited with an error may only have reacted to another's loss, so rig's
  // own watchdog findings come before it.
  if (signalled_) return *signalled_;
  if (lost_daemon_) return *lost_daemon_;
  // A rank that is gone after saying it waited on other hosts ended itself.
  if (gone_ && complaining_ranks_.count(gone_->rank) == 0) return *gone_;
  if (!complaining_ranks_.empty()) {
    // These ranks are alive and waiting on ranks of other hosts: the hosts
    // none of them is on are the ones to suspect.
    std::set<std::string> alive;
    for (const int r : complaining_ranks_) {
      if (r >= 0 && r < static_cast<int>(rank_hosts.size()))
        alive.insert(rank_hosts[static_cast<std::size_t>(r)]);
    }
    Failure f{Failure::Kind::hosts, -1, {}, complaint_};
    for (const auto& host : rank_hosts) {
      bool listed = false;
      for (const auto& h : f.hosts) listed = listed || h == host;
      if (!listed && alive.count(host) == 0) f.hosts.push_back(host);
    }
    if (!f.hosts.empty()) return f;
  }
  if (exited_) return *exited_;
  return Failure{};
}

}  // namespace rig::launch::elastic

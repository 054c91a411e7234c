// Where the next attempt of an elastic job runs: the hosts with the slots
// and hosts that failed left out (each for a back-off that doubles with every
// failure of the same host), and a world size N' with N' x k' equal to the
// job's micro-batches per step, so that the global batch never changes.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launch/elastic/hosts.hpp"

namespace rig::launch::elastic {

using Clock = std::chrono::steady_clock;

struct WorldSize {
  int processes = 0;
  int iter_size = 0;
};

// The largest N' in [min_nproc, max_nproc] with N' <= available slots that
// divides micro_batches (k' = micro_batches / N'), if any.
std::optional<WorldSize> choose_world(int micro_batches, int available_slots, int min_nproc,
                                      int max_nproc);

class Exclusions {
 public:
  explicit Exclusions(double backoff_s) : backoff_s_(backoff_s) {}
  // One slot of `host` failed (its rank died); the host stays.
  void slot_failed(const std::string& host, Clock::time_point now);
  // All of `host` is unreachable.
  void host_failed(const std::string& host, Clock::time_point now);
  // `hosts` less what is still left out at `now`.
  std::vector<HostSlots> available(const std::vector<HostSlots>& hosts,
                                   Clock::time_point now) const;
  // "localhost: 1 slot for 300 s" lines for the log.
  std::vector<std::string> describe(Clock::time_point now) const;

 private:
  struct Entry {
    int failures = 0;   // how often it failed so far (the back-off doubles)
    int slots_out = 0;  // slots left out; -1: the whole host
    Clock::time_point until;
  };
  Clock::time_point until_after(int failures, Clock::time_point now) const;

  double backoff_s_;
  std::map<std::string, Entry> entries_;
};

// The first hosts of `hosts` holding `processes` slots, in order (the last
// one possibly with fewer slots than it has); ranks are placed by slot, so
// rank r runs on rank_hosts(...)[r].
std::vector<HostSlots> take_slots(const std::vector<HostSlots>& hosts, int processes);
std::vector<std::string> rank_hosts(const std::vector<HostSlots>& placed);

}  // namespace rig::launch::elastic

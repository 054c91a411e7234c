// Stale-synchronous-parallel admission for one parameter-server shard: which
// worker reads of the weights may go ahead, given how far the workers'
// gradient pushes have drifted apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

namespace rig::engine::ps {

// Each worker's clock is how many gradients it has pushed to this shard. A
// worker wanting the weights to compute its push for clock c is admitted when
// c - slowest() <= max_staleness, where slowest() is the least clock among the
// active workers: max_staleness 0 is synchronous, a negative max_staleness
// means unbounded (MXNet's dist_async).
//
// slowest() is O(1) and pushed() / retire() O(log W): the active workers'
// clocks are kept in a multiset.
class StalenessGate {
 public:
  // Throws std::invalid_argument when `workers` < 1.
  StalenessGate(int workers, std::int64_t max_staleness, std::int64_t start_clock = 0);

  // The worker's clock advances by one. Throws std::invalid_argument on a bad
  // or retired worker.
  void pushed(int worker);
  std::int64_t clock(int worker) const;  // its last clock if retired
  // Finished or dropped: no longer holds the others back (again: no effect).
  void retire(int worker);
  // A retired worker counts again, from `clock` (a dropped straggler that
  // caught up). Throws std::invalid_argument when it is active.
  void readmit(int worker, std::int64_t clock);
  bool active(int worker) const;
  int active_workers() const;
  int workers() const { return static_cast<int>(clocks_.size()); }

  // Least clock over the active workers; with none active,
  // std::numeric_limits<std::int64_t>::max().
  std::int64_t slowest() const;
  bool admits(std::int64_t clock) const;
  // clock - slowest(), at least 0 (what a read at `clock` is behind the
  // slowest worker); 0 with no worker active.
  std::int64_t staleness(std::int64_t clock) const;
  bool unbounded() const { return max_staleness_ < 0; }
  std::int64_t max_staleness() const { return max_staleness_; }

 private:
  std::size_t index(int worker) const;  // throws std::invalid_argument when out of range

  std::int64_t max_staleness_;
  std::vector<std::int64_t> clocks_;
  std::vector<bool> active_;
  std::multiset<std::int64_t> active_clocks_;
};

}  // namespace rig::engine::ps

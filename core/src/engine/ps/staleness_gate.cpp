// StalenessGate: the workers' clocks and the multiset of the active ones.
#include "engine/ps/staleness_gate.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace rig::engine::ps {

StalenessGate::StalenessGate(int workers, std::int64_t max_staleness, std::int64_t start_clock)
    : max_staleness_(max_staleness) {
  if (workers < 1) {
    throw std::invalid_argument(
        fmt::format("StalenessGate: needs at least 1 worker, found {}", workers));
  }
  const auto count = static_cast<std::size_t>(workers);
  clocks_.assign(count, start_clock);
  active_.assign(count, true);
  for (std::size_t i = 0; i < count; ++i) active_clocks_.insert(start_clock);
}

std::size_t StalenessGate::index(int worker) const {
  if (worker < 0 || worker >= workers()) {
    throw std::invalid_argument(
        fmt::format("StalenessGate: worker {} is not in 0 .. {}", worker, workers() - 1));
  }
  return static_cast<std::size_t>(worker);
}

void StalenessGate::pushed(int worker) {
  const std::size_t i = index(worker);
  if (!active_[i]) {
    throw std::invalid_argument(
        fmt::format("StalenessGate: worker {} pushed after it was retired", worker));
  }
  active_clocks_.erase(active_clocks_.find(clocks_[i]));
  active_clocks_.insert(++clocks_[i]);
}

std::int64_t StalenessGate::clock(int worker) const {
  return clocks_[index(worker)];
}

void StalenessGate::retire(int worker) {
  const std::size_t i = index(worker);
  if (!active_[i]) return;
  active_[i] = false;
  active_clocks_.erase(active_clocks_.find(clocks_[i]));
}

void StalenessGate::readmit(int worker, std::int64_t clock) {
  const std::size_t i = index(worker);
  if (active_[i]) throw std::invalid_argument("StalenessGate::readmit: the worker is active");
  active_[i] = true;
  clocks_[i] = clock;
  active_clocks_.insert(clock);
}

bool StalenessGate::active(int worker) const {
  return active_[index(worker)];
}

int StalenessGate::active_workers() const {
  return static_cast<int>(active_clocks_.size());
}

std::int64_t StalenessGate::slowest() const {
  return active_clocks_.empty() ? std::numeric_limits<std::int64_t>::max()
                                : *active_clocks_.begin();
}

bool StalenessGate::admits(std::int64_t clock) const {
  return unbounded() || staleness(clock) <= max_staleness_;
}

std::int64_t StalenessGate::staleness(std::int64_t clock) const {
  // With none active, clock - slowest() could overflow; nobody is held back.
  if (active_clocks_.empty()) return 0;
  return std::max<std::int64_t>(clock - slowest(), 0);
}

}  // namespace rig::engine::ps

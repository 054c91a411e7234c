#include "launch/elastic/placement.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace rig::launch::elastic {

std::optional<WorldSize> choose_world(int micro_batches, int available_slots, int min_nproc,
                                      int max_nproc) {
  const int most = std::min(available_slots, max_nproc);
  for (int n = most; n >= std::max(min_nproc, 1); --n) {
    if (micro_batches % n == 0) return WorldSize{n, micro_batches / n};
  }
  return std::nullopt;
}

Clock::time_point Exclusions::until_after(int failures, Clock::time_point now) const {
  // 1x, 2x, 4x ... the back-off, at most 64x.
  const double factor = std::ldexp(1.0, std::min(failures - 1, 6));
  return now + std::chrono::duration_cast<Clock::duration>(
                   std::chrono::duration<double>(backoff_s_ * factor));
}

void Exclusions::slot_failed(const std::string& host, Clock::time_point now) {
  Entry& e = entries_[host];
  if (e.until <= now) e.slots_out = 0;  // an old exclusion that had run out
  ++e.failures;
  if (e.slots_out >= 0) ++e.slots_out;
  e.until = until_after(e.failures, now);
}

void Exclusions::host_failed(const std::string& host, Clock::time_point now) {
  Entry& e = entries_[host];
  ++e.failures;
  e.slots_out = -1;
  e.until = until_after(e.failures, now);
}

std::vector<HostSlots> Exclusions::available(const std::vector<HostSlots>& hosts,
                                             Clock::time_point now) const {
  std::vector<HostSlots> left;
  for (const auto& h : hosts) {
    HostSlots usable = h;
    if (const auto it = entries_.find(h.host); it != entries_.end() && it->second.until > now) {
      usable.slots = it->second.slots_out < 0 ? 0 : std::max(0, h.slots - it->second.slots_out);
    }
    if (usable.slots > 0) left.push_back(usable);
  }
  return left;
}

std::vector<std::string> Exclusions::describe(Clock::time_point now) const {
  std::vector<std::string> lines;
  for (const auto& [host, e] : entries_) {
    if (e.until <= now) continue;
    const double left = std::chrono::duration<double>(e.until - now).count();
    lines.push_back(e.slots_out < 0 ? fmt::format("{} (all of it) for {:.0f} s more", host, left)
                                    : fmt::format("{} slot(s) of {} for {:.0f} s more", e.slots_out,
                                                  host, left));
  }
  return lines;
}

std::vector<HostSlots> take_slots(const std::vector<HostSlots>& hosts, int processes) {
  std::vector<HostSlots> placed;
  int left = processes;
  for (const auto& h : hosts) {
    if (left <= 0) break;
    const int take = std::min(left, h.slots);
    placed.push_back({h.host, take});
    left -= take;
  }
  return placed;
}

std::vector<std::string> rank_hosts(const std::vector<HostSlots>& placed) {
  std::vector<std::string> out;
  for (const auto& h : placed) {
    for (int i = 0; i < h.slots; ++i) out.push_back(h.host);
  }
  return out;
}

}  // namespace rig::launch::elastic

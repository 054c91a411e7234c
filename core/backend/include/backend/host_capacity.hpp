// The host's memory as this process may use it: what Linux reports
// (/proc/meminfo) bounded by the limit of the process's cgroup (a container's
// or a batch job's), so that an experiment too large for the machine fails
// with a message before the kernel's OOM killer ends it without one.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "backend/memory.hpp"

namespace rig::backend {

// A cgroup's limit and what it uses now, of which `reclaimable` is page
// cache the kernel frees under pressure.
struct CgroupMemory {
  std::size_t limit = 0;
  std::size_t usage = 0;
  std::size_t reclaimable = 0;
};

// MemTotal and MemAvailable + SwapFree from /proc/meminfo's text, bounded by
// the tightest of `cgroups` (the process's and its ancestors' limits);
// nothing when `meminfo` has no MemTotal.
std::optional<DeviceCapacity> host_capacity_from(std::string_view meminfo,
                                                 std::span<const CgroupMemory> cgroups);

// The same from this machine's files (cgroup v2, else v1). Reads a few files:
// for the rare allocations of new memory, not for every tensor.
std::optional<DeviceCapacity> host_capacity();

}  // namespace rig::backend

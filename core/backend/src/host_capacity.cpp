#include "backend/host_capacity.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace rig::backend {

namespace {

// The text of a small file; empty when it cannot be read.
std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<std::size_t> parse_number(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  return static_cast<std::size_t>(value);
}

// The number after `key` at the start of a line of `text` ("MemTotal:", "file "), or nothing.
std::optional<std::size_t> field(std::string_view text, std::string_view key) {
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    if (line.starts_with(key)) return parse_number(line.substr(key.size()));
    at = end + 1;
  }
  return std::nullopt;
}

// One cgroup folder's limit, if it has one ("max" and v1's near-2^63 mean none).
std::optional<CgroupMemory> cgroup_at(const std::string& dir, bool v2) {
  const std::string limit_text = read_text(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
  const std::optional<std::size_t> limit = parse_number(limit_text);
  if (!limit || *limit >= (std::size_t{1} << 62U)) return std::nullopt;
  const std::optional<std::size_t> usage =
      parse_number(read_text(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes")));
  if (!usage) return std::nullopt;
  const std::string stat = read_text(dir + "/memory.stat");
  std::optional<std::size_t> cache = field(stat, v2 ? "file " : "total_cache ");
  if (!cache && !v2) cache = field(stat, "cache ");
  return CgroupMemory{*limit, *usage, cache.value_or(0)};
}

// The limits of this process's cgroup and its ancestors (v2), or of its
// memory cgroup (v1, as mounted in a container).
std::vector<CgroupMemory> process_cgroups() {
  std::vector<CgroupMemory> found;
  const std::string self = read_text("/proc/self/cgroup");
  std::istringstream lines(self);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("0::")) {  // v2: walk up to the root
      std::string path = line.substr(3);
      while (true) {
        if (auto c = cgroup_at("/sys/fs/cgroup" + (path == "/" ? "" : path), true)) {
          found.push_back(*c);
        }
        if (path.empty() || path == "/") break;
        const std::size_t slash = path.rfind('/');
        path = slash == 0 ? "/" : path.substr(0, slash);
      }
    } else if (line.find(":memory:") != std::string::npos) {  // v1
      const std::string path = line.substr(line.find(":memory:") + 8);
      if (auto c = cgroup_at("/sys/fs/cgroup/memory" + path, false)) found.push_back(*c);
      if (auto c = cgroup_at("/sys/fs/cgroup/memory", false)) found.push_back(*c);
    }
  }
  return found;
}

}  // namespace

std::optional<DeviceCapacity> host_capacity_from(std::string_view meminfo,
                                                 std::span<const CgroupMemory> cgroups) {
  constexpr std::size_t kKiB = 1024;
  const std::optional<std::size_t> total = field(meminfo, "MemTotal:");
  if (!total) return std::nullopt;
  // Kernels before 3.14 have no MemAvailable: MemFree is the closest.
  std::optional<std::size_t> available = field(meminfo, "MemAvailable:");
  if (!available) available = field(meminfo, "MemFree:");
  DeviceCapacity capacity{*total * kKiB,
                          (available.value_or(0) + field(meminfo, "SwapFree:").value_or(0)) * kKiB};
  for (const CgroupMemory& c : cgroups) {
    capacity.total = std::min(capacity.total, c.limit);
    const std::size_t used = c.usage - std::min(c.usage, c.reclaimable);
    capacity.available = std::min(capacity.available, c.limit - std::min(c.limit, used));
  }
  return capacity;
}

std::optional<DeviceCapacity> host_capacity() {
  const std::vector<CgroupMemory> cgroups = process_cgroups();
  return host_capacity_from(read_text("/proc/meminfo"), cgroups);
}

}  // namespace rig::backend

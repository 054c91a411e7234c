// Byte counters of one device's caching allocator (every backend's memory).
#pragma once

#include <cstddef>

namespace rig {

struct AllocatorStats {
  std::size_t current_bytes = 0;  // held by live storages
  std::size_t peak_bytes = 0;     // max of current_bytes since the last reset_peak()
  std::size_t cached_bytes = 0;   // freed by storages, kept for reuse
  // max of current_bytes + cached_bytes since the last reset_peak(): the most
  // memory held from the system or device (PyTorch's max_memory_reserved)
  std::size_t peak_reserved_bytes = 0;
  std::size_t system_allocations = 0;  // times memory was taken from the system
  std::size_t requests = 0;            // storages allocated
};

}  // namespace rig

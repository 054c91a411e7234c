// One allocator abstraction for every device's memory: host memory for the
// CPU, the guarded arena of the sim device, cudaMalloc for CUDA. Storage takes
// its bytes from the MemoryPool of its device's backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "rig/allocator_stats.hpp"

namespace rig::backend {

// A device stream (CUDA's cudaStream_t) as a number; 0 is the device's
// default stream, the only one of the CPU and sim devices.
using StreamId = std::uintptr_t;

struct Block {
  std::byte* data = nullptr;  // in the device's address space
  std::size_t capacity = 0;   // the pool's size class: at least the bytes asked for
  StreamId stream = 0;        // the stream it was allocated for (stream-ordered reuse)
};

// How much memory a device has: all of it, and what is free for more
// allocations now (for the host: what Linux and its cgroup would still give
// this process without swapping or killing it).
struct DeviceCapacity {
  std::size_t total = 0;
  std::size_t available = 0;
};

class MemoryPool {
 public:
  virtual ~MemoryPool() = default;
  // At least `bytes` (64-byte aligned); throws std::bad_alloc when out of memory.
  virtual Block allocate(std::size_t bytes) = 0;
  virtual void deallocate(const Block& block) noexcept = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
  virtual void empty_cache() = 0;  // gives cached blocks back to the device
  // The device's memory, for the message of an allocation that failed;
  // nothing where it is not known.
  virtual std::optional<DeviceCapacity> capacity() const { return std::nullopt; }
};

}  // namespace rig::backend

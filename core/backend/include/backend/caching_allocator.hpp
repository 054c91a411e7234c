// The caching allocator behind Storage on the CPU and on the sim device (CUDA
// has its own, stream-aware one in core/cuda/allocator). Freed blocks are kept
// and handed out again, so once a training loop is warm, a tensor allocation
// takes no memory from the system. Two pools, as on the GPU: blocks up to
// 1 MiB have size classes and free lists; larger ones are pieces of segments
// (SegmentPool), best fit, split and merged, so that a loop whose shapes vary
// (a Transformer's bucketed batches) reuses one shape's memory for another
// instead of caching a block of every size it has seen.
#pragma once

#include <array>
#include <cstddef>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/memory.hpp"
#include "backend/segment_pool.hpp"
#include "backend/size_classes.hpp"
#include "rig/allocator_stats.hpp"

namespace rig::backend {

// Where a device's memory comes from: aligned host memory, or the sim arena.
struct RawMemory {
  virtual ~RawMemory() = default;
  virtual std::byte* allocate(std::size_t bytes) = 0;  // throws std::bad_alloc
  virtual void release(std::byte* data) noexcept = 0;
  // The memory behind it (MemoryPool::capacity); nothing where unknown.
  virtual std::optional<DeviceCapacity> capacity() const { return std::nullopt; }
};

class CachingAllocator final : public MemoryPool {
 public:
  // caching = false passes every request to `raw` (RIG_ALLOCATOR=system, for
  // ASan); the counters are kept either way. Cached bytes beyond
  // `cache_limit` go back to the system.
  CachingAllocator(RawMemory& raw, bool caching, std::size_t cache_limit);
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  Block allocate(std::size_t bytes) override;
  void deallocate(const Block& block) noexcept override;
  AllocatorStats stats() const override;
  void reset_peak() override;
  void empty_cache() override;
  std::optional<DeviceCapacity> capacity() const override { return raw_.capacity(); }

  // The block size a request of `bytes` gets (size_classes.hpp with 64-byte
  // granularity; a large block may be up to 1 MiB more: the rest of a free
  // piece too small to split off).
  static std::size_t round_size(std::size_t bytes);

 private:
  // The small pool's classes, for 64-byte granularity (checked where it is used).
  static constexpr std::size_t kClasses = size_classes::class_count(64);
  Block allocate_large(std::size_t rounded);
  void count_handed_out_locked(std::size_t capacity);
  // Gives cached blocks back until at most `keep` bytes are cached (wholly
  // free segments go first, largest first).
  void release_cached_locked(std::size_t keep) noexcept;

  RawMemory& raw_;
  const bool caching_;
  const std::size_t cache_limit_;
  mutable std::mutex mutex_;
  std::array<std::vector<std::byte*>, kClasses> free_;
  SegmentPool segments_;  // the large pool
  AllocatorStats stats_;
};

// RIG_ALLOCATOR: unset or "caching" -> true; "system" -> false (every
// request goes to the system, for memory checkers); anything else throws.
bool caching_enabled();
// RIG_ALLOCATOR_CACHE_MB: the bytes a pool keeps for reuse (default 4 GiB).
std::size_t cache_limit();

// Aligned host memory (std::aligned_alloc): the CPU's RawMemory. A request
// of 16 MiB or more (a new segment, never a warm loop's) that is larger than
// what the host can still give (host_capacity) is refused with
// std::bad_alloc, which the caller turns into a message, rather than taken
// and, once written, met by the kernel's OOM killer.
RawMemory& host_memory();

}  // namespace rig::backend

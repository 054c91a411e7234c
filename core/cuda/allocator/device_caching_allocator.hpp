// The bookkeeping of the CUDA caching allocator, with no CUDA in it: size
// classes, per-stream free lists, stream-ordered reuse and byte counters. The
// memory and the stream markers come from a DeviceMemorySource: cudaMalloc and
// CUDA events in librig_cuda (runtime/device_memory.cu), a fake in the unit
// tests, so that all of this is tested on machines without a GPU.
//
// Reuse is stream-ordered, as in PyTorch: a freed block goes back to the free
// list of the stream it was allocated on, and the next allocation of its size
// class on that stream takes it at once, without waiting for the GPU: work on
// one stream runs in order, so the new user's kernels start after the old
// user's have finished. A block that was also used on other streams is held
// back until the work queued on those streams at the time of the free has
// completed (a marker recorded on each).
//
// Two pools. Requests up to 1 MiB get size classes (8 per power of two) and
// whole allocations of their class. Larger ones, the activations, take pieces
// of segments: a segment is one allocation from the source (20 MiB, or the
// request rounded up to 2 MiB); a request takes the smallest free piece of
// its stream that fits, split when more than 1 MiB would be left over, and a
// freed piece merges with free neighbours. So a large block wastes at most
// 1 MiB instead of up to 12.5%, and memory freed by one shape serves another
// (a 392 MiB activation's block serves two 196 MiB ones). The sizes are
// backend/size_classes.hpp's and the pieces' bookkeeping backend::SegmentPool,
// both shared with the host's caching allocator.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "backend/memory.hpp"
#include "backend/segment_pool.hpp"
#include "backend/size_classes.hpp"
#include "rig/allocator_stats.hpp"

namespace rig::cuda {

// A CUDA stream (cudaStream_t) as a number; 0 is the default stream.
using StreamId = std::uintptr_t;

class DeviceMemorySource {
 public:
  // A point in a stream's work (a CUDA event), as a number.
  using Marker = std::uintptr_t;

  virtual ~DeviceMemorySource() = default;
  // At least `bytes` of device memory; throws std::bad_alloc when out of memory.
  virtual std::byte* allocate(std::size_t bytes) = 0;
  // Gives memory back. Work queued on it may still be running: the source
  // makes that safe (cudaFree waits for the device).
  virtual void release(std::byte* data) noexcept = 0;
  // A marker that completes once the work queued on `stream` so far has finished.
  virtual Marker record(StreamId stream) = 0;
  virtual bool completed(Marker marker) = 0;
  virtual void wait(Marker marker) = 0;  // blocks the calling thread until it completes
  virtual void release_marker(Marker marker) noexcept = 0;
  // The device's memory (cudaMemGetInfo), for the message of an allocation
  // that failed; nothing where it is not known.
  virtual std::optional<backend::DeviceCapacity> capacity() const { return std::nullopt; }
};

// One allocation: the caller keeps it and hands it back to deallocate.
struct DeviceBlock {
  std::byte* data = nullptr;
  std::size_t capacity = 0;  // the block's size class, at least the bytes asked for
  StreamId stream = 0;       // the stream it was allocated on
};

// Every device's counters, as the tensors' MemoryPool reports them: here
// current_bytes counts blocks by capacity, cached_bytes what is held from the
// source and not handed out, and system_allocations the source's blocks and
// segments.
using DeviceAllocatorStats = AllocatorStats;

class DeviceCachingAllocator {
 public:
  // caching = false gives every block back at once (RIG_ALLOCATOR=system, for
  // compute-sanitizer); the counters are kept either way.
  DeviceCachingAllocator(DeviceMemorySource& source, bool caching);
  ~DeviceCachingAllocator();  // waits for pending blocks and releases every cached one
  DeviceCachingAllocator(const DeviceCachingAllocator&) = delete;
  DeviceCachingAllocator& operator=(const DeviceCachingAllocator&) = delete;

  // A block of at least `bytes` for work on `stream`. Out of memory, it gives
  // the cached blocks back to the source and tries again before throwing
  // std::bad_alloc.
  DeviceBlock allocate(std::size_t bytes, StreamId stream);
  // Frees `block`. `also_used_on`: streams other than block.stream that read or
  // wrote it; the block is reused only after their work queued so far is done.
  void deallocate(const DeviceBlock& block, std::span<const StreamId> also_used_on = {}) noexcept;

  DeviceAllocatorStats stats() const;
  std::optional<backend::DeviceCapacity> capacity() const { return source_.capacity(); }
  void reset_peak();
  // Gives every cached block back to the source (waiting for pending ones).
  void empty_cache();

  // The size a request of `bytes` is served at: multiples of 512 B up to
  // 4 KiB, then 8 steps per power of two (at most 12.5% waste) up to 1 MiB,
  // then multiples of 512 B again (a large block may still be up to 1 MiB
  // more: the rest of a piece too small to split off). 512 B keeps every
  // block aligned for vectorised loads wherever cudaMalloc placed it.
  static std::size_t round_size(std::size_t bytes);
  // The segment a large request of `rounded` bytes allocates when no free
  // piece fits: 20 MiB up to 10 MiB (shared by several), else `rounded`
  // rounded up to 2 MiB.
  static std::size_t segment_size(std::size_t rounded);

 private:
  struct CachedBlock {
    std::byte* data = nullptr;
    StreamId stream = 0;
    std::vector<DeviceMemorySource::Marker> pending;  // other streams' work still using it
  };
  // A large block freed while other streams' work may still use it.
  struct PendingPiece {
    std::byte* data = nullptr;
    std::vector<DeviceMemorySource::Marker> markers;
  };

  // The small pool's classes, for 512-byte granularity (checked where it is used).
  static constexpr std::size_t kClasses = backend::size_classes::class_count(512);

  // Whether `markers` have all completed; releases the completed ones.
  bool completed_locked(std::vector<DeviceMemorySource::Marker>& markers);
  void count_handed_out_locked(std::size_t capacity);
  DeviceBlock allocate_small(std::size_t rounded, StreamId stream);
  DeviceBlock allocate_large_locked(std::size_t rounded, StreamId stream);
  // The smallest free piece of `stream` of at least `rounded` bytes, handed out.
  std::optional<DeviceBlock> take_large_locked(std::size_t rounded, StreamId stream);
  void free_large_locked(const DeviceBlock& block, std::span<const StreamId> also_used_on);
  // Pending pieces whose markers have completed (all of them, waiting, if
  // `wait`) become free.
  void settle_pending_locked(bool wait);
  // Gives cached blocks and wholly free segments back to the source: the
  // ready ones, or all (waiting for pending work).
  void release_cached_locked(bool wait_for_pending);

  DeviceMemorySource& source_;
  const bool caching_;
  mutable std::mutex mutex_;
  std::array<std::vector<CachedBlock>, kClasses> free_;
  backend::SegmentPool segments_;  // the large pool
  std::vector<PendingPiece> pending_pieces_;
  DeviceAllocatorStats stats_;
};

}  // namespace rig::cuda

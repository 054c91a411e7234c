#include "cuda/allocator/device_caching_allocator.hpp"

#include <algorithm>
#include <bit>
#include <new>

namespace rig::cuda {
namespace {

constexpr std::size_t kGranularity = 512;
constexpr std::size_t kSmallLimit = 4096;
constexpr unsigned kSmallBits = 12;  // log2(kSmallLimit)
constexpr unsigned kSubSteps = 8;    // size classes per power of two above kSmallLimit

}  // namespace

DeviceCachingAllocator::DeviceCachingAllocator(DeviceMemorySource& source, bool caching)
    : source_(source), caching_(caching) {}

DeviceCachingAllocator::~DeviceCachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    release_cached_locked(true);
  } catch (...) {
    // A marker could not be waited for (a failed device): the blocks still
    // pending stay with the source rather than be freed under running work.
  }
}

std::size_t DeviceCachingAllocator::round_size(std::size_t bytes) {
  if (bytes <= kSmallLimit) {
    return bytes == 0 ? kGranularity : (bytes + kGranularity - 1) & ~(kGranularity - 1);
  }
  // 2^p < bytes <= 2^(p+1): round up to a multiple of 2^p / kSubSteps.
  const unsigned p = static_cast<unsigned>(std::bit_width(bytes - 1)) - 1;
  const std::size_t step = std::size_t{1} << (p - 3);
  return (bytes + step - 1) & ~(step - 1);
}

std::size_t DeviceCachingAllocator::class_capacity(std::size_t index) {
  if (index < kSmallLimit / kGranularity) return (index + 1) * kGranularity;
  const std::size_t j = index - kSmallLimit / kGranularity;
  const std::size_t p = kSmallBits + j / kSubSteps;
  return (kSubSteps + 1 + j % kSubSteps) << (p - 3);
}

std::size_t DeviceCachingAllocator::class_index(std::size_t rounded) {
  if (rounded <= kSmallLimit) return rounded / kGranularity - 1;
  const unsigned p = static_cast<unsigned>(std::bit_width(rounded - 1)) - 1;
  const std::size_t k = rounded >> (p - 3);  // kSubSteps + 1 .. 2 kSubSteps
  return kSmallLimit / kGranularity + (p - kSmallBits) * kSubSteps + (k - kSubSteps - 1);
}

bool DeviceCachingAllocator::ready_locked(CachedBlock& block) {
  while (!block.pending.empty()) {
    if (!source_.completed(block.pending.back())) return false;
    source_.release_marker(block.pending.back());
    block.pending.pop_back();
  }
  return true;
}

DeviceBlock DeviceCachingAllocator::allocate(std::size_t bytes, StreamId stream) {
  DeviceBlock block{nullptr, round_size(bytes), stream};
  if (block.capacity < bytes) throw std::bad_alloc();  // overflowed
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.requests;
    auto& list = free_[class_index(block.capacity)];
    // Newest first: the block most likely still in the GPU's caches.
    for (auto it = list.rbegin(); it != list.rend(); ++it) {
      if (it->stream == stream && ready_locked(*it)) {
        block.data = it->data;
        list.erase(std::next(it).base());
        stats_.cached_bytes -= block.capacity;
        count_handed_out_locked(block.capacity);
        return block;
      }
    }
  }
  // Out of memory: first give back what can go at once, then wait for the rest.
  for (int attempt = 0; block.data == nullptr; ++attempt) {
    try {
      block.data = source_.allocate(block.capacity);
    } catch (const std::bad_alloc&) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (attempt == 2 || stats_.cached_bytes == 0) throw;
      release_cached_locked(attempt == 1);
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.system_allocations;
  count_handed_out_locked(block.capacity);
  return block;
}

void DeviceCachingAllocator::count_handed_out_locked(std::size_t capacity) {
  stats_.current_bytes += capacity;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
}

void DeviceCachingAllocator::deallocate(const DeviceBlock& block,
                                        std::span<const StreamId> also_used_on) noexcept {
  if (block.data == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.current_bytes -= block.capacity;
  if (caching_) {
    CachedBlock cached{block.data, block.stream, {}};
    try {
      cached.pending.reserve(also_used_on.size());
      for (StreamId other : also_used_on) {
        if (other != block.stream) cached.pending.push_back(source_.record(other));
      }
      free_[class_index(block.capacity)].push_back(std::move(cached));
      stats_.cached_bytes += block.capacity;
      return;
    } catch (...) {
      // No marker or no room to remember the block: give it back instead (the
      // source makes that safe while work still uses it).
      for (auto marker : cached.pending) source_.release_marker(marker);
    }
  }
  source_.release(block.data);
}

DeviceAllocatorStats DeviceCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void DeviceCachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
}

void DeviceCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked(true);
}

void DeviceCachingAllocator::release_cached_locked(bool wait_for_pending) {
  for (std::size_t c = 0; c < kClasses; ++c) {
    std::erase_if(free_[c], [&](CachedBlock& block) {
      if (wait_for_pending) {
        for (auto marker : block.pending) {
          source_.wait(marker);
          source_.release_marker(marker);
        }
        block.pending.clear();
      }
      if (!ready_locked(block)) return false;
      source_.release(block.data);
      stats_.cached_bytes -= class_capacity(c);
      return true;
    });
  }
}

}  // namespace rig::cuda

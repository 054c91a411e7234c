#include "cuda/allocator/device_caching_allocator.hpp"

#include <algorithm>
#include <new>

namespace rig::cuda {
namespace {

namespace classes = backend::size_classes;
// 512 B keeps every block aligned for vectorised loads wherever cudaMalloc placed it.
constexpr std::size_t kGranularity = 512;

}  // namespace

DeviceCachingAllocator::DeviceCachingAllocator(DeviceMemorySource& source, bool caching)
    : source_(source), caching_(caching), segments_(classes::kLargeAbove) {}

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
  static_assert(kClasses == classes::class_count(kGranularity));
  return classes::round_size(bytes, kGranularity);
}

std::size_t DeviceCachingAllocator::segment_size(std::size_t rounded) {
  return classes::segment_size(rounded);
}

bool DeviceCachingAllocator::completed_locked(std::vector<DeviceMemorySource::Marker>& markers) {
  while (!markers.empty()) {
    if (!source_.completed(markers.back())) return false;
    source_.release_marker(markers.back());
    markers.pop_back();
  }
  return true;
}

DeviceBlock DeviceCachingAllocator::allocate(std::size_t bytes, StreamId stream) {
  const std::size_t rounded = round_size(bytes);
  if (rounded < bytes) throw std::bad_alloc();  // overflowed
  if (caching_ && classes::is_large(rounded)) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.requests;
    return allocate_large_locked(rounded, stream);
  }
  return allocate_small(rounded, stream);
}

DeviceBlock DeviceCachingAllocator::allocate_small(std::size_t rounded, StreamId stream) {
  DeviceBlock block{nullptr, rounded, stream};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.requests;
    // Newest first: the block most likely still in the GPU's caches.
    auto& list = free_[caching_ ? classes::class_index(block.capacity, kGranularity) : 0];
    for (auto it = list.rbegin(); it != list.rend(); ++it) {
      if (it->stream == stream && completed_locked(it->pending)) {
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
  // Called after every allocation from the source too, so this sees each rise.
  stats_.peak_reserved_bytes =
      std::max(stats_.peak_reserved_bytes, stats_.current_bytes + stats_.cached_bytes);
}

DeviceBlock DeviceCachingAllocator::allocate_large_locked(std::size_t rounded, StreamId stream) {
  settle_pending_locked(false);
  if (auto block = take_large_locked(rounded, stream)) return *block;
  // A new segment. Out of memory: first give back what can go at once, then
  // wait for the rest (pending pieces may then also fit).
  const std::size_t bytes = segment_size(rounded);
  if (bytes < rounded) throw std::bad_alloc();  // overflowed
  std::byte* data = nullptr;
  for (int attempt = 0; data == nullptr; ++attempt) {
    try {
      data = source_.allocate(bytes);
    } catch (const std::bad_alloc&) {
      if (attempt == 2 || stats_.cached_bytes == 0) throw;
      // A pending piece that fits, once its markers complete, is used as it
      // is; else the cache goes back to make room.
      settle_pending_locked(attempt == 1);
      if (auto block = take_large_locked(rounded, stream)) return *block;
      release_cached_locked(attempt == 1);
    }
  }
  backend::SegmentPool::Piece piece;
  try {
    piece = segments_.take_from_new_segment(data, bytes, rounded, stream);
  } catch (...) {
    source_.release(data);  // no room to remember it
    throw;
  }
  ++stats_.system_allocations;
  stats_.cached_bytes += bytes - piece.size;
  count_handed_out_locked(piece.size);
  return {piece.data, piece.size, stream};
}

std::optional<DeviceBlock> DeviceCachingAllocator::take_large_locked(std::size_t rounded,
                                                                     StreamId stream) {
  const auto piece = segments_.take(rounded, stream);
  if (!piece) return std::nullopt;
  stats_.cached_bytes -= piece->size;
  count_handed_out_locked(piece->size);
  return DeviceBlock{piece->data, piece->size, stream};
}

void DeviceCachingAllocator::free_large_locked(const DeviceBlock& block,
                                               std::span<const StreamId> also_used_on) {
  PendingPiece pending{block.data, {}};
  try {
    for (StreamId other : also_used_on) {
      if (other != block.stream) pending.markers.push_back(source_.record(other));
    }
    if (pending.markers.empty()) {
      segments_.give_back(block.data);
      return;
    }
    pending_pieces_.push_back(std::move(pending));
  } catch (...) {
    for (auto marker : pending.markers) source_.release_marker(marker);
    segments_.hold(block.data);  // out of use for good (see deallocate)
    throw;
  }
  segments_.hold(block.data);
}

void DeviceCachingAllocator::settle_pending_locked(bool wait) {
  std::erase_if(pending_pieces_, [&](PendingPiece& piece) {
    if (wait) {
      for (auto marker : piece.markers) source_.wait(marker);
    }
    if (!completed_locked(piece.markers)) return false;
    segments_.give_back(piece.data);
    return true;
  });
}

void DeviceCachingAllocator::deallocate(const DeviceBlock& block,
                                        std::span<const StreamId> also_used_on) noexcept {
  if (block.data == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.current_bytes -= block.capacity;
  if (caching_ && classes::is_large(block.capacity)) {
    const auto size = segments_.size_in_use(block.data);
    if (!size) return;  // not this allocator's block
    stats_.cached_bytes += *size;
    try {
      free_large_locked(block, also_used_on);
    } catch (...) {
      // A marker could not be made or remembered (a failing context): the
      // piece stays out of use for good, as reusing it could race with work
      // on a stream that has no marker. Unlike a small block it cannot be
      // given back alone: it is part of a segment.
    }
    return;
  }
  if (caching_) {
    CachedBlock cached{block.data, block.stream, {}};
    try {
      cached.pending.reserve(also_used_on.size());
      for (StreamId other : also_used_on) {
        if (other != block.stream) cached.pending.push_back(source_.record(other));
      }
      free_[classes::class_index(block.capacity, kGranularity)].push_back(std::move(cached));
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
  stats_.peak_reserved_bytes = stats_.current_bytes + stats_.cached_bytes;
}

void DeviceCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked(true);
}

void DeviceCachingAllocator::release_cached_locked(bool wait_for_pending) {
  settle_pending_locked(wait_for_pending);
  stats_.cached_bytes -= segments_.release_free_segments(
      [this](std::byte* data, std::size_t /*size*/) { source_.release(data); });
  for (std::size_t c = 0; c < kClasses; ++c) {
    std::erase_if(free_[c], [&](CachedBlock& block) {
      if (wait_for_pending) {
        for (auto marker : block.pending) {
          source_.wait(marker);
          source_.release_marker(marker);
        }
        block.pending.clear();
      }
      if (!completed_locked(block.pending)) return false;
      source_.release(block.data);
      stats_.cached_bytes -= classes::class_capacity(c, kGranularity);
      return true;
    });
  }
}

}  // namespace rig::cuda

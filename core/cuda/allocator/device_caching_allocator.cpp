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
constexpr std::size_t kMiB = std::size_t{1} << 20U;
constexpr std::size_t kLargeAbove = kMiB;  // larger requests take pieces of segments
// Up to this, a request's segment is kSharedSegment, which several share.
constexpr std::size_t kSharedSegmentUpTo = 10 * kMiB;
constexpr std::size_t kSharedSegment = 20 * kMiB;
constexpr std::size_t kSegmentGranularity = 2 * kMiB;

std::size_t round_up(std::size_t bytes, std::size_t granularity) {
  return (bytes + granularity - 1) & ~(granularity - 1);
}

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
  if (bytes <= kSmallLimit || bytes > kLargeAbove) {
    return bytes == 0 ? kGranularity : round_up(bytes, kGranularity);
  }
  // 2^p < bytes <= 2^(p+1): round up to a multiple of 2^p / kSubSteps.
  const unsigned p = static_cast<unsigned>(std::bit_width(bytes - 1)) - 1;
  return round_up(bytes, std::size_t{1} << (p - 3));
}

std::size_t DeviceCachingAllocator::segment_size(std::size_t rounded) {
  return rounded <= kSharedSegmentUpTo ? kSharedSegment : round_up(rounded, kSegmentGranularity);
}

bool DeviceCachingAllocator::is_large(std::size_t rounded) {
  return rounded > kLargeAbove;
}

bool DeviceCachingAllocator::SmallestFirst::operator()(const Piece* a, const Piece* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->data < b->data;
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
  if (caching_ && is_large(rounded)) {
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
    auto& list = free_[caching_ ? class_index(block.capacity) : 0];
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
  if (Piece* piece = best_fit_locked(rounded, stream)) return hand_out_locked(piece, rounded);
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
      if (Piece* piece = best_fit_locked(rounded, stream)) return hand_out_locked(piece, rounded);
      release_cached_locked(attempt == 1);
    }
  }
  auto owned = std::make_unique<Piece>();
  Piece* piece = owned.get();
  piece->data = data;
  piece->size = bytes;
  piece->stream = stream;
  pieces_.emplace(data, std::move(owned));
  free_pieces_.insert(piece);
  ++stats_.system_allocations;
  stats_.cached_bytes += bytes;
  return hand_out_locked(piece, rounded);
}

DeviceCachingAllocator::Piece* DeviceCachingAllocator::best_fit_locked(std::size_t rounded,
                                                                       StreamId stream) {
  Piece key;
  key.size = rounded;
  key.stream = stream;
  const auto it = free_pieces_.lower_bound(&key);
  return it != free_pieces_.end() && (*it)->stream == stream ? *it : nullptr;
}

DeviceBlock DeviceCachingAllocator::hand_out_locked(Piece* piece, std::size_t rounded) {
  free_pieces_.erase(piece);
  if (piece->size - rounded > kLargeAbove) {
    auto rest = std::make_unique<Piece>();
    rest->data = piece->data + rounded;
    rest->size = piece->size - rounded;
    rest->stream = piece->stream;
    rest->previous = piece;
    rest->next = piece->next;
    if (piece->next != nullptr) piece->next->previous = rest.get();
    piece->next = rest.get();
    piece->size = rounded;
    free_pieces_.insert(rest.get());
    pieces_.emplace(rest->data, std::move(rest));
  }
  piece->in_use = true;
  stats_.cached_bytes -= piece->size;
  count_handed_out_locked(piece->size);
  return {piece->data, piece->size, piece->stream};
}

void DeviceCachingAllocator::free_large_locked(Piece* piece,
                                               std::span<const StreamId> also_used_on) {
  piece->in_use = false;
  stats_.cached_bytes += piece->size;
  for (StreamId other : also_used_on) {
    if (other != piece->stream) piece->pending.push_back(source_.record(other));
  }
  if (piece->pending.empty()) {
    make_free_locked(piece);
  } else {
    pending_pieces_.push_back(piece);
  }
}

void DeviceCachingAllocator::make_free_locked(Piece* piece) {
  const auto is_free = [](const Piece* p) {
    return p != nullptr && !p->in_use && p->pending.empty();
  };
  // Takes `second` (free, after `first`) into `first`.
  const auto merge = [this](Piece* first, Piece* second) {
    free_pieces_.erase(second);
    first->size += second->size;
    first->next = second->next;
    if (second->next != nullptr) second->next->previous = first;
    pieces_.erase(second->data);
  };
  if (is_free(piece->next)) merge(piece, piece->next);
  if (is_free(piece->previous)) {
    Piece* previous = piece->previous;
    free_pieces_.erase(previous);
    merge(previous, piece);
    piece = previous;
  }
  free_pieces_.insert(piece);
}

void DeviceCachingAllocator::settle_pending_locked(bool wait) {
  std::erase_if(pending_pieces_, [&](Piece* piece) {
    if (wait) {
      for (auto marker : piece->pending) source_.wait(marker);
    }
    if (!completed_locked(piece->pending)) return false;
    make_free_locked(piece);
    return true;
  });
}

void DeviceCachingAllocator::deallocate(const DeviceBlock& block,
                                        std::span<const StreamId> also_used_on) noexcept {
  if (block.data == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.current_bytes -= block.capacity;
  if (caching_ && is_large(block.capacity)) {
    const auto found = pieces_.find(block.data);
    if (found == pieces_.end()) return;  // not this allocator's block
    Piece* piece = found->second.get();
    try {
      free_large_locked(piece, also_used_on);
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
  stats_.peak_reserved_bytes = stats_.current_bytes + stats_.cached_bytes;
}

void DeviceCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked(true);
}

void DeviceCachingAllocator::release_cached_locked(bool wait_for_pending) {
  settle_pending_locked(wait_for_pending);
  for (auto it = free_pieces_.begin(); it != free_pieces_.end();) {
    Piece* piece = *it;
    if (piece->previous != nullptr || piece->next != nullptr) {
      ++it;
      continue;
    }
    // The whole segment is free.
    it = free_pieces_.erase(it);
    source_.release(piece->data);
    stats_.cached_bytes -= piece->size;
    pieces_.erase(piece->data);
  }
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
      stats_.cached_bytes -= class_capacity(c);
      return true;
    });
  }
}

}  // namespace rig::cuda

// The caching allocator and aligned host memory.
#include "backend/caching_allocator.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "backend/host_capacity.hpp"
#include "rig/environment_switch.hpp"

namespace rig::backend {

namespace {

constexpr std::size_t kAlignment = 64;  // a cache line; what AVX-512 loads like
constexpr std::size_t kInitialFreeListCapacity = 32;
// Requests from here up are checked against what the host can still give.
constexpr std::size_t kCheckedAbove = std::size_t{16} << 20U;

// host_memory_check_enabled, read once; a bad value is refused where the
// engine reads it first (device_choice.cpp).
bool checks_host_memory() {
  static const bool on = [] {
    try {
      return host_memory_check_enabled();
    } catch (const std::invalid_argument&) {
      return true;
    }
  }();
  return on;
}

class HostMemory final : public RawMemory {
 public:
  std::byte* allocate(std::size_t bytes) override {
    if (bytes >= kCheckedAbove && checks_host_memory()) {
      const std::optional<DeviceCapacity> host = host_capacity();
      if (host && bytes > host->available) throw std::bad_alloc();
    }
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<std::byte*>(p);
  }
  void release(std::byte* data) noexcept override { std::free(data); }
  std::optional<DeviceCapacity> capacity() const override { return host_capacity(); }
};

}  // namespace

std::size_t cache_limit() {
  if (const char* env = std::getenv("RIG_ALLOCATOR_CACHE_MB")) {
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(env, &end, 10);
    if (end != env && *end == '\0') return static_cast<std::size_t>(mb) << 20U;
  }
  return std::size_t{4} << 30U;
}

bool caching_enabled() {
  const char* env = std::getenv("RIG_ALLOCATOR");
  if (env == nullptr || std::string_view(env) == "caching" || std::string_view(env).empty()) {
    return true;
  }
  if (std::string_view(env) == "system") return false;
  throw std::invalid_argument(
      fmt::format("RIG_ALLOCATOR={}: expected 'caching' (the default) or 'system'", env));
}

CachingAllocator::CachingAllocator(RawMemory& raw, bool caching, std::size_t limit)
    : raw_(raw), caching_(caching), cache_limit_(limit), segments_(size_classes::kLargeAbove) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked(0);
}

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  static_assert(kClasses == size_classes::class_count(kAlignment));
  return size_classes::round_size(bytes, kAlignment);
}

RawMemory& host_memory() {
  // Leaked on purpose: storages may be freed by static destructors after
  // this function's statics would be gone.
  static HostMemory* host = new HostMemory();
  return *host;
}

Block CachingAllocator::allocate(std::size_t bytes) {
  const std::size_t capacity = round_size(bytes);
  if (capacity < bytes) throw std::bad_alloc();  // overflowed
  if (caching_ && size_classes::is_large(capacity)) return allocate_large(capacity);
  std::byte* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.requests;
    if (caching_) {
      auto& list = free_[size_classes::class_index(capacity, kAlignment)];
      if (!list.empty()) {
        data = list.back();
        list.pop_back();
        stats_.cached_bytes -= capacity;
      }
    }
    if (data == nullptr) {
      ++stats_.system_allocations;
    }
    count_handed_out_locked(capacity);
  }
  if (data != nullptr) return {data, capacity};
  try {
    return {raw_.allocate(capacity), capacity};
  } catch (...) {
    // Out of memory: give the cache back and try once more.
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked(0);
  }
  try {
    return {raw_.allocate(capacity), capacity};
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.current_bytes -= capacity;
    throw;
  }
}

Block CachingAllocator::allocate_large(std::size_t rounded) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.requests;
  if (const auto piece = segments_.take(rounded, 0)) {
    stats_.cached_bytes -= piece->size;
    count_handed_out_locked(piece->size);
    return {piece->data, piece->size};
  }
  const std::size_t bytes = size_classes::segment_size(rounded);
  if (bytes < rounded) throw std::bad_alloc();  // overflowed
  std::byte* data = nullptr;
  try {
    data = raw_.allocate(bytes);
  } catch (const std::bad_alloc&) {
    // Out of memory: give the cache back and try once more.
    if (stats_.cached_bytes == 0) throw;
    release_cached_locked(0);
    data = raw_.allocate(bytes);
  }
  SegmentPool::Piece piece;
  try {
    piece = segments_.take_from_new_segment(data, bytes, rounded, 0);
  } catch (...) {
    raw_.release(data);  // no room to remember it
    throw;
  }
  ++stats_.system_allocations;
  stats_.cached_bytes += bytes - piece.size;
  count_handed_out_locked(piece.size);
  return {piece.data, piece.size};
}

void CachingAllocator::count_handed_out_locked(std::size_t capacity) {
  stats_.current_bytes += capacity;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  stats_.peak_reserved_bytes =
      std::max(stats_.peak_reserved_bytes, stats_.current_bytes + stats_.cached_bytes);
}

void CachingAllocator::deallocate(const Block& block) noexcept {
  std::byte* data = block.data;
  const std::size_t capacity = block.capacity;
  if (data == nullptr) return;
  bool keep = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.current_bytes -= capacity;
    if (caching_ && size_classes::is_large(capacity)) {
      try {
        if (!segments_.give_back(data)) return;  // not this allocator's block
        stats_.cached_bytes += capacity;
      } catch (...) {
        // No room to remember the merged piece: it stays out of use (it is
        // part of a segment and cannot go back alone).
      }
      if (stats_.cached_bytes > cache_limit_) release_cached_locked(cache_limit_);
      return;
    }
    if (caching_ && stats_.cached_bytes + capacity <= cache_limit_) {
      auto& list = free_[size_classes::class_index(capacity, kAlignment)];
      try {
        // Room for a few blocks at once, so that the list of a size class
        // rarely grows (an allocation) once a training loop is warm.
        if (list.capacity() == 0) list.reserve(kInitialFreeListCapacity);
        list.push_back(data);
        stats_.cached_bytes += capacity;
        keep = true;
      } catch (...) {
        keep = false;  // no room to remember it: give it back
      }
    }
  }
  if (!keep) raw_.release(data);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.peak_reserved_bytes = stats_.current_bytes + stats_.cached_bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked(0);
}

void CachingAllocator::release_cached_locked(std::size_t keep) noexcept {
  if (stats_.cached_bytes <= keep) return;
  stats_.cached_bytes -= segments_.release_free_segments(
      [this](std::byte* data, std::size_t /*size*/) { raw_.release(data); },
      stats_.cached_bytes - keep);
  // Then the small blocks, largest first.
  for (std::size_t c = kClasses; c-- > 0 && stats_.cached_bytes > keep;) {
    auto& list = free_[c];
    while (!list.empty() && stats_.cached_bytes > keep) {
      raw_.release(list.back());
      list.pop_back();
      stats_.cached_bytes -= size_classes::class_capacity(c, kAlignment);
    }
    if (list.empty()) {
      list.shrink_to_fit();
    }
  }
}

}  // namespace rig::backend

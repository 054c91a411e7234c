// The caching allocator and aligned host memory.
#include "backend/caching_allocator.hpp"

#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

namespace rig::backend {

namespace {

constexpr std::size_t kAlignment = 64;  // a cache line; what AVX-512 loads like
constexpr std::size_t kSmallLimit = 4096;
constexpr unsigned kSmallBits = 12;  // log2(kSmallLimit)
constexpr unsigned kSubSteps = 8;    // size classes per power of two above kSmallLimit
constexpr std::size_t kInitialFreeListCapacity = 32;

class HostMemory final : public RawMemory {
 public:
  std::byte* allocate(std::size_t bytes) override {
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<std::byte*>(p);
  }
  void release(std::byte* data) noexcept override { std::free(data); }
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
    : raw_(raw), caching_(caching), cache_limit_(limit) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_all_cached_locked();
}

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  if (bytes <= kSmallLimit)
    return bytes == 0 ? kAlignment : (bytes + kAlignment - 1) & ~(kAlignment - 1);
  // 2^p < bytes <= 2^(p+1): round up to a multiple of 2^p / kSubSteps.
  const unsigned p = static_cast<unsigned>(std::bit_width(bytes - 1)) - 1;
  const std::size_t step = std::size_t{1} << (p - 3);
  return (bytes + step - 1) & ~(step - 1);
}

std::size_t CachingAllocator::class_index(std::size_t rounded) {
  if (rounded <= kSmallLimit) return rounded / kAlignment - 1;
  const unsigned p = static_cast<unsigned>(std::bit_width(rounded - 1)) - 1;
  const std::size_t k = rounded >> (p - 3);  // kSubSteps + 1 .. 2 kSubSteps
  return kSmallLimit / kAlignment + (p - kSmallBits) * kSubSteps + (k - kSubSteps - 1);
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
  std::byte* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.requests;
    if (caching_) {
      auto& list = free_[class_index(capacity)];
      if (!list.empty()) {
        data = list.back();
        list.pop_back();
        stats_.cached_bytes -= capacity;
      }
    }
    if (data == nullptr) {
      ++stats_.system_allocations;
    }
    stats_.current_bytes += capacity;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    stats_.peak_reserved_bytes =
        std::max(stats_.peak_reserved_bytes, stats_.current_bytes + stats_.cached_bytes);
  }
  if (data != nullptr) return {data, capacity};
  try {
    return {raw_.allocate(capacity), capacity};
  } catch (...) {
    // Out of memory: give the cache back and try once more.
    std::lock_guard<std::mutex> lock(mutex_);
    release_all_cached_locked();
  }
  try {
    return {raw_.allocate(capacity), capacity};
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.current_bytes -= capacity;
    throw;
  }
}

void CachingAllocator::deallocate(const Block& block) noexcept {
  std::byte* data = block.data;
  const std::size_t capacity = block.capacity;
  if (data == nullptr) return;
  bool keep = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.current_bytes -= capacity;
    if (caching_ && stats_.cached_bytes + capacity <= cache_limit_) {
      auto& list = free_[class_index(capacity)];
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
  release_all_cached_locked();
}

void CachingAllocator::release_all_cached_locked() noexcept {
  for (auto& list : free_) {
    for (std::byte* p : list) raw_.release(p);
    list.clear();
    list.shrink_to_fit();
  }
  stats_.cached_bytes = 0;
}

}  // namespace rig::backend

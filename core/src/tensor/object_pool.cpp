#include "tensor/object_pool.hpp"

#include <cassert>

#include "backend/caching_allocator.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
// Free blocks are poisoned, so AddressSanitizer still reports a use after free
// of a pooled object.
#define RIG_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define RIG_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define RIG_POISON(p, n) ((void)(p), (void)(n))
#define RIG_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace rig::detail {

void* ObjectPool::allocate(std::size_t bytes) {
  assert(bytes > 0 && bytes <= kMaxBlock);
  if (!pooling_) return ::operator new(bytes);
  const std::size_t index = class_of(bytes);
  const std::size_t size = (index + 1) * kGranule;
  SizeClass& c = classes_[index];
  std::lock_guard<std::mutex> lock(c.mutex);
  std::byte* block = nullptr;
  if (c.free != nullptr) {
    FreeBlock* head = c.free;
    RIG_UNPOISON(head, size);
    c.free = head->next;
    block = reinterpret_cast<std::byte*>(head);
  } else {
    if (c.carve == c.carve_end) {
      c.chunks.push_back(std::make_unique_for_overwrite<std::byte[]>(kChunkBytes));
      c.carve = c.chunks.back().get();
      c.carve_end = c.carve + kChunkBytes / size * size;
      RIG_POISON(c.carve, kChunkBytes);
    }
    block = c.carve;
    c.carve += size;
    RIG_UNPOISON(block, size);
  }
  ++c.live;
  return block;
}

void ObjectPool::deallocate(void* block, std::size_t bytes) noexcept {
  if (block == nullptr) return;
  if (!pooling_) {
    ::operator delete(block);
    return;
  }
  const std::size_t index = class_of(bytes);
  SizeClass& c = classes_[index];
  std::lock_guard<std::mutex> lock(c.mutex);
  auto* head = static_cast<FreeBlock*>(block);
  head->next = c.free;
  c.free = head;
  --c.live;
  RIG_POISON(block, (index + 1) * kGranule);
}

ObjectPool::Stats ObjectPool::stats() const {
  Stats s;
  for (const SizeClass& c : classes_) {
    std::lock_guard<std::mutex> lock(c.mutex);
    s.chunk_bytes += c.chunks.size() * kChunkBytes;
    s.live_blocks += c.live;
  }
  return s;
}

ObjectPool& object_pool() {
  // Constructed in place and never destroyed (see the header).
  alignas(ObjectPool) static std::byte storage[sizeof(ObjectPool)];
  static ObjectPool* const pool = ::new (storage) ObjectPool(backend::caching_enabled());
  return *pool;
}

}  // namespace rig::detail

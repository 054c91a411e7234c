// The pool behind the small objects every op creates (TensorImpl, Storage and
// autograd::Node, each with its shared_ptr control block, through
// std::allocate_shared): blocks of a few size classes, carved from 64 KiB
// chunks and recycled through per-class free lists, so once a training loop
// is warm an op takes no memory from the heap. Any thread may free a block.
// RIG_ALLOCATOR=system passes every request to operator new (for memory
// checkers), as it does for tensor storage.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace rig::detail {

class ObjectPool {
 public:
  static constexpr std::size_t kGranule = 64;  // block sizes are multiples of a cache line
  static constexpr std::size_t kMaxBlock = 1024;
  static constexpr std::size_t kMaxAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
  static constexpr std::size_t kChunkBytes = std::size_t{64} << 10U;

  explicit ObjectPool(bool pooling) : pooling_(pooling) {}
  ObjectPool(const ObjectPool&) = delete;
  ObjectPool& operator=(const ObjectPool&) = delete;

  // A block of at least `bytes` (<= kMaxBlock) aligned to kMaxAlign.
  void* allocate(std::size_t bytes);
  // Returns a block from allocate(bytes), on any thread.
  void deallocate(void* block, std::size_t bytes) noexcept;

  struct Stats {
    std::size_t chunk_bytes = 0;  // taken from the heap, never given back
    std::size_t live_blocks = 0;  // handed out and not yet returned
  };
  Stats stats() const;

 private:
  struct FreeBlock {
    FreeBlock* next;
  };
  struct SizeClass {
    mutable std::mutex mutex;
    FreeBlock* free = nullptr;   // returned blocks
    std::byte* carve = nullptr;  // the uncarved rest of this class's newest chunk
    std::byte* carve_end = nullptr;
    std::size_t live = 0;
    std::vector<std::unique_ptr<std::byte[]>> chunks;  // owns every block of this class
  };
  static constexpr std::size_t kClasses = kMaxBlock / kGranule;
  static std::size_t class_of(std::size_t bytes) { return (bytes + kGranule - 1) / kGranule - 1; }

  const bool pooling_;
  std::array<SizeClass, kClasses> classes_;
};

// The process-wide pool; never destroyed, since objects may be released by
// other static destructors at exit.
ObjectPool& object_pool();

// A std::allocator for allocate_shared that takes single objects of pool
// size from object_pool() and anything else from operator new.
template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() noexcept = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}  // NOLINT: rebinding is implicit

  static constexpr bool kPooled =
      sizeof(T) <= ObjectPool::kMaxBlock && alignof(T) <= ObjectPool::kMaxAlign;

  T* allocate(std::size_t n) {
    if (kPooled && n == 1) return static_cast<T*>(object_pool().allocate(sizeof(T)));
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (kPooled && n == 1) {
      object_pool().deallocate(p, sizeof(T));
    } else {
      std::allocator<T>().deallocate(p, n);
    }
  }
  friend bool operator==(const PoolAllocator&, const PoolAllocator&) noexcept { return true; }
};

// std::make_shared, with the object and its control block from the pool.
template <class T, class... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PoolAllocator<T>(), std::forward<Args>(args)...);
}

}  // namespace rig::detail
